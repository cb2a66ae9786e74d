"""A client host as a run uses it, wherever it lives (a client actor: orchestrator/ray_runtime/client_actor.py, or
the coordinator's process: orchestrator/server/coordinator_clients.py): built on the run directory's client states
and warmed up, asked for a checkpoint's state files, described in actors.json."""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from orchestrator.clients.client_store import ClientStateStore
from orchestrator.io import checkpoint as ckpt
from orchestrator.io.state_files import states_dir

if TYPE_CHECKING:
    from orchestrator.clients.client_host import ClientHost


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


def ray_is_up() -> bool:
    """Whether this process is connected to Ray (a process that never imported Ray is not: a run in the driver,
    orchestrator/driver/local_coordinator.py)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def host_info(host: ClientHost | None, client_ids: list[int], device: str, gpu_ids: list[str]) -> dict[str, Any]:
    """Where a client host runs, what it was given, and where its tensors are (an entry of actors.json)."""
    import torch

    placed = host.placement() if host is not None else {}
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    node_id, assigned = None, {}  # a run without Ray has neither
    if ray_is_up():
        ctx = sys.modules["ray"].get_runtime_context()
        node_id, assigned = ctx.get_node_id(), dict(ctx.get_assigned_resources())
    return {"node_id": node_id, "pid": os.getpid(), "gpu_ids": gpu_ids, "clients": list(client_ids),
            "device": device, "assigned": assigned, **placed, "cuda_peak_bytes": peak}


def write_actor_info(run_dir: str, info: list[dict[str, Any]]) -> None:
    """actors.json in the run directory: where each client host runs (each client actor's node, pid, resources
    and restarts so far, a restarted actor's entry with its new pid; or the coordinator hosting every client)."""
    import json

    from orchestrator.io import storage

    storage.write_bytes_atomic(storage.join(run_dir, "actors.json"), json.dumps(info, indent=1).encode())
