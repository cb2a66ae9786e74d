"""Where a checkpoint's tensors were when they were saved (test_gpu, test_runtime)."""
from __future__ import annotations

from pathlib import Path

import torch


def tensor_devices(obj) -> set[str]:
    if isinstance(obj, torch.Tensor):
        return {obj.device.type}
    if isinstance(obj, dict):
        return set().union(*(tensor_devices(v) for v in obj.values()))
    if isinstance(obj, (list, tuple)):
        return set().union(*(tensor_devices(v) for v in obj))
    return set()


def saved_devices(checkpoint: Path) -> set[str]:
    """Of the server snapshot and the client state files the checkpoint names. Loaded without map_location, a
    tensor saved from CUDA would come back on CUDA (or fail to load on a machine without one)."""
    from orchestrator.io.checkpoint import client_state_files

    paths = [Path(checkpoint) / "server.pt", *(path for path, _ in client_state_files(str(checkpoint)).values())]
    return set().union(*(tensor_devices(torch.load(path, weights_only=True)) for path in paths))
