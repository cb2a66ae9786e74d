"""Where a coordinator's clients train (resources.clients_on): a `ClientPool`, on client actors
(orchestrator/ray_runtime/client_pool.py's `ActorPool`), or in the coordinator's own process (`CoordinatorClients`),
which a small round's fixed cost favours.

Either answers the server's typed calls (orchestrator/clients/client_calls.py) with the same `ClientHost`, so a run's
history does not depend on where its clients train: the coordinator's host is one actor hosting every client."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.clients.run_host import checkpoint_states, host_for_run, host_info, ray_is_up
from orchestrator.phases import Phases

if TYPE_CHECKING:
    from orchestrator.clients.client_calls import ClientCall, ClientResults


class ClientPool(Protocol):
    """What the coordinator asks of wherever its clients train."""

    def call(self, call: ClientCall) -> ClientResults: ...

    # `call` sent now, its results awaited later (None: where the clients train, a call is done when it returns)
    begin: Callable[[ClientCall], Callable[[], ClientResults]] | None

    def changed_states(self, since: int | None, until: int, keep: list[int]) -> dict[int, dict[str, Any]]: ...

    def info(self, timeout: float | None = None) -> list[dict[str, Any]]: ...


class CoordinatorClients:
    """Every client hosted in the coordinator's process: a round costs no Ray call and no serialisation, which on
    a small round (benchmarks/README.md, "Tiny clients") is most of it. The coordinator then asks Ray for the
    CPUs of one client actor (orchestrator/driver/run_start.py)."""

    begin = None  # a call here is done when it returns: nothing to overlap it with

    def __init__(self, cfg, data, run_dir: str, rounds_done: int, phases: Phases):
        import torch

        torch.set_num_threads(max(1, int(cfg.resources.cpus_per_actor)))
        self.host = host_for_run(cfg, data, list(range(data.num_clients)), run_dir, rounds_done)
        self.phases = phases

    def call(self, call: ClientCall) -> ClientResults:
        with self.phases(f"{call.name}: host work in the coordinator"):
            return self.host.call(call)

    def changed_states(self, since: int | None, until: int, keep: list[int]) -> dict[int, dict[str, Any]]:
        return checkpoint_states(self.host, since, until, keep)

    def info(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """One entry, in actors.json's form: the coordinator's process hosting every client."""
        return [{"in_coordinator": True, "without_ray": not ray_is_up(),
                 **host_info(self.host, self.host.client_ids(), "cpu", []), "restarts": 0}]
