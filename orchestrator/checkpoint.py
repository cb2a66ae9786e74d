"""Checkpoints: everything needed to continue a run, written atomically to a path or a pyarrow.fs URI.

Layout under a run directory:
    checkpoints/round-000010/server.pt    round, global state, history, byte counters
    checkpoints/round-000010/clients.pt   {client id: persistent client state}
    checkpoints/LATEST                    the name of the newest complete checkpoint (written last)

Client sampling and every client's randomness derive from (seed, round, client), so the round number is
the whole RNG state. Files are read with `weights_only=True`: loading never executes pickled code.
"""
from __future__ import annotations

from typing import Any

from orchestrator import storage


def checkpoints_dir(run_dir: str) -> str:
    return storage.join(run_dir, "checkpoints")


def write_checkpoint(run_dir: str, server_snapshot: dict[str, Any], client_states: dict[int, Any]) -> str:
    name = f"round-{server_snapshot['round']:06d}"
    base = storage.join(checkpoints_dir(run_dir), name)
    storage.write_bytes_atomic(storage.join(base, "clients.pt"), storage.torch_bytes(client_states))
    storage.write_bytes_atomic(storage.join(base, "server.pt"), storage.torch_bytes(server_snapshot))
    storage.write_bytes_atomic(storage.join(checkpoints_dir(run_dir), "LATEST"), name.encode())
    return base


def latest_checkpoint(run_dir: str | None) -> str | None:
    if not run_dir:
        return None
    marker = storage.join(checkpoints_dir(run_dir), "LATEST")
    if not storage.exists(marker):
        return None
    return storage.join(checkpoints_dir(run_dir), storage.read_bytes(marker).decode().strip())


def load_server_snapshot(checkpoint: str) -> dict[str, Any]:
    return storage.torch_load_safe(storage.read_bytes(storage.join(checkpoint, "server.pt")))


def load_client_states(checkpoint: str, client_ids: list[int] | None = None) -> dict[int, Any]:
    states = storage.torch_load_safe(storage.read_bytes(storage.join(checkpoint, "clients.pt")))
    if client_ids is None:
        return states
    wanted = set(client_ids)
    return {c: s for c, s in states.items() if c in wanted}
