"""A model's tensors as a state and back: the CPU copy a client sends up or a server keeps, and a state on a device."""
from __future__ import annotations

import torch
from torch import nn

from tasks.types import State


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def state_of(model: nn.Module) -> State:
    """A detached CPU copy of a model's tensors."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def on_device(tensors: State, device) -> State:
    """The tensors of a flat state on `device` (on CPU: the very same tensor objects)."""
    return {k: v.to(device) for k, v in tensors.items()}

