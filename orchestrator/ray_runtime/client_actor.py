"""A client actor (fractional GPUs, many logical clients each: a `ClientHost`) and what a host does for the run
wherever it lives (a client actor, or the coordinator's process: orchestrator/ray_runtime/client_pool.py): built
on the run directory's client states, asked for a checkpoint's state files, described in actors.json."""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import ray

from orchestrator.clients.client_store import ClientStateStore, states_dir
from orchestrator.io import checkpoint as ckpt
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


def host_for_run(cfg, data, client_ids: list[int], run_dir: str, rounds_done: int, device: str = "cpu") -> ClientHost:
    """A host of `client_ids` whose states live in the run directory, as the run stands after `rounds_done` rounds
    (states written after it are from a run that went further, and are dropped), warmed up (orchestrator/clients/warm_up.py)."""
    from orchestrator.clients.client_host import ClientHost
    from orchestrator.clients.warm_up import build_working_model, warm_up

    store = ClientStateStore(states_dir(run_dir), cfg.resources.resident_clients, client_ids, upto=rounds_done,
                             keep=ckpt.checkpoint_rounds(run_dir))
    host = ClientHost(cfg, data, client_ids, device=device, store=store)
    warm_up(cfg, data, client_ids, device)  # the first round's first-use costs, paid here (resources.warm_up)
    build_working_model(host.algorithm, device)
    return host


def checkpoint_states(host: ClientHost, since: int | None, until: int, keep: list[int]) -> dict[int, dict[str, Any]]:
    """What a checkpoint of round `until` records of `host`'s clients (the state files written since the
    checkpoint of round `since`), after deleting the files no checkpoint in `keep` or the run needs."""
    host.states.prune(keep, until)
    return host.states.changed(since, until)


def host_info(host: ClientHost | None, client_ids: list[int], device: str, gpu_ids: list[str]) -> dict[str, Any]:
    """Where a client host runs, what it was given, and where its tensors are (an entry of actors.json)."""
    import torch

    placed = host.placement() if host is not None else {}
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    node_id, assigned = None, {}  # a run without Ray (orchestrator/driver/local_coordinator.py) has neither
    if ray.is_initialized():
        ctx = ray.get_runtime_context()
        node_id, assigned = ctx.get_node_id(), dict(ctx.get_assigned_resources())
    return {"node_id": node_id, "pid": os.getpid(), "gpu_ids": gpu_ids, "clients": list(client_ids),
            "device": device, "assigned": assigned, **placed, "cuda_peak_bytes": peak}


def write_actor_info(run_dir: str, info: list[dict[str, Any]]) -> None:
    """actors.json in the run directory: where each client host runs (each client actor's node, pid, resources
    and restarts so far, a restarted actor's entry with its new pid; or the coordinator hosting every client)."""
    import json

    from orchestrator.io import storage

    storage.write_bytes_atomic(storage.join(run_dir, "actors.json"), json.dumps(info, indent=1).encode())
