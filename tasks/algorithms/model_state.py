"""A model's tensors as a state and back: the CPU copy a client sends up or a server keeps, and a state on a device."""
from __future__ import annotations

from collections.abc import Callable

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



def stepped(start: State, models: list[State], parameters: set[str],
            step: Callable[[str, torch.Tensor], torch.Tensor | float],
            buffer_mean: Callable[[str], torch.Tensor]) -> State:
    """A server step: each of `parameters` x moved to x − step(name, x) (x in float64), each floating buffer
    buffer_mean(name) of the clients', each integer buffer the first client's; every tensor in its own dtype."""
    out = {}
    for name, x in start.items():
        if name in parameters:
            x64 = x.to(torch.float64)
            out[name] = (x64 - step(name, x64)).to(x.dtype)
        elif torch.is_floating_point(x):
            out[name] = buffer_mean(name).to(x.dtype)
        else:
            out[name] = models[0][name].clone()
    return out
