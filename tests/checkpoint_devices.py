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
    """Loaded without map_location, a tensor saved from CUDA would come back on CUDA (or fail to load on a
    machine without one)."""
    return set().union(*(tensor_devices(torch.load(Path(checkpoint) / f, weights_only=True))
                         for f in ("server.pt", "clients.pt")))
