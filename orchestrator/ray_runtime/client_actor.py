"""A client actor: fractional GPUs, many logical clients each (a `ClientHost`, built and asked as a run's host
anywhere: orchestrator/clients/run_host.py)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import ray

from orchestrator.clients.run_host import checkpoint_states, host_for_run, host_info
from orchestrator.process_memory import keep_freed_memory
from orchestrator.ray_runtime import wire

if TYPE_CHECKING:
    from orchestrator.clients.client_calls import ClientCall, ClientResults
    from orchestrator.clients.client_host import ClientHost


@ray.remote(max_restarts=-1, max_task_retries=0)
class ClientActor:
    """A Ray actor hosting logical clients, given its data by `load` after construction.

    The data is not a constructor argument: Ray restarts a crashed actor by running its constructor again, and
    cannot promise that an object-store argument is still there (ray-project/ray#53727; it warns about every
    such actor). So a (re)started actor answers `ping` with False until the coordinator loads it, and `load`
    also finds its clients' states in the run directory (orchestrator/clients/client_store.py)."""

    def __init__(self, cfg, client_ids: list[int], run_dir: str, threads: int):
        import torch

        torch.set_num_threads(max(1, threads))
        keep_freed_memory()
        wire.register()
        self.cfg, self.client_ids, self.run_dir = cfg, client_ids, run_dir
        self.gpu_ids = [str(g) for g in ray.get_gpu_ids()]
        self.device = "cuda" if self.gpu_ids and torch.cuda.is_available() else "cpu"
        self.host: ClientHost | None = None

    def load(self, data_box: list, rounds_done: int, client_ids: list[int]) -> None:
        """`data_box` = [ObjectRef of the FederatedData], which the run keeps alive; `rounds_done`: the round
        the run is at (states written after it are from a run that went further, and are dropped); `client_ids`:
        the clients it hosts (blocks of client groups where a method keeps client state: client_groups.py)."""
        self.client_ids = client_ids
        self.host = host_for_run(self.cfg, ray.get(data_box[0]), self.client_ids, self.run_dir, rounds_done, self.device)

    def call(self, call: ClientCall, payload) -> tuple[ClientResults, float] | None:
        """The host's answers to `call` with `payload` (a method's exception raises as a MethodError naming the
        client: tasks/algorithms/faults.py), and the seconds spent in the host. None: this actor was restarted and is not loaded yet. The
        payload is an argument of its own so that Ray resolves it where it is an object-store reference."""
        if self.host is None:
            return None
        start = time.perf_counter()
        results = self.host.call(call.with_payload(payload))
        return results, time.perf_counter() - start

    def checkpoint_states(self, since: int | None, until: int, keep: list[int]) -> dict[int, dict[str, Any]]:
        """What a checkpoint of round `until` records of this actor's clients (the state files written since the
        checkpoint of round `since`), after deleting the files no checkpoint in `keep` or the run needs."""
        return checkpoint_states(self.host, since, until, keep)

    def evaluate_global(self, state, batch_size: int) -> dict[str, float] | None | bool:
        """The global model's test-set accuracies on this actor's device; False: not loaded yet."""
        return False if self.host is None else self.host.evaluate_global(state, batch_size)

    def count_correct(self, state, shares: dict[str, tuple[int, int]], batch_size: int) -> dict[str, int] | bool:
        """The global model's correct predictions on `shares` ({test set: (start, end)}); False: not loaded yet."""
        return False if self.host is None else self.host.count_correct(state, shares, batch_size)

    def ping(self) -> bool:
        """Alive; True once loaded."""
        return self.host is not None

    def info(self) -> dict[str, Any]:
        """Where this actor runs, what it was given, and where its tensors are (actors.json)."""
        return host_info(self.host, self.client_ids, self.device, self.gpu_ids)
