"""Weight initialisation as part of the model config (`model.init`, `model.head_init`), applied once after build.

Schemes (every Linear and Conv layer; norm layers keep PyTorch's weight 1, bias 0):
- `torch_default`: whatever the layer's constructor drew (Linear/Conv: U(±1/√fan_in) for weight and bias).
- `he_normal`: N(0, 2/fan_in) weights (Kaiming, ReLU gain), zero biases.
- `he_uniform`: U(±√(6/fan_in)) weights, zero biases.
- `xavier_uniform`: U(±√(6/(fan_in + fan_out))) weights, zero biases.
- `xavier_normal`: N(0, 2/(fan_in + fan_out)) weights, zero biases.
- `lecun_normal`: N(0, 1/fan_in) weights, zero biases (docs/methods/fednh.md §12.1's N(0, 1/d) head).

`head_init` (default: the same as `init`) is applied to the classifier alone, after the body's scheme.
Draws come from torch's global generator, which `Algorithm.new_model` seeds with the run seed, so every
method of a seed starts from the same θ⁰.
"""
from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

InitScheme = Literal["torch_default", "he_normal", "he_uniform", "xavier_uniform", "xavier_normal", "lecun_normal"]
INIT_SCHEMES: tuple[str, ...] = InitScheme.__args__  # type: ignore[attr-defined]

WEIGHTED_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


@torch.no_grad()
def init_layer(layer: nn.Module, scheme: str) -> None:
    """Re-draw one Linear/Conv layer's weight by `scheme` and zero its bias (no-op for torch_default)."""
    if scheme == "torch_default":
        return
    w = layer.weight
    fan_in, fan_out = nn.init._calculate_fan_in_and_fan_out(w)
    if scheme == "he_normal":
        w.normal_(0.0, math.sqrt(2.0 / fan_in))
    elif scheme == "he_uniform":
        bound = math.sqrt(6.0 / fan_in)
        w.uniform_(-bound, bound)
    elif scheme == "xavier_uniform":
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        w.uniform_(-bound, bound)
    elif scheme == "xavier_normal":
        w.normal_(0.0, math.sqrt(2.0 / (fan_in + fan_out)))
    elif scheme == "lecun_normal":
        w.normal_(0.0, math.sqrt(1.0 / fan_in))
    else:
        raise ValueError(f"unknown initialisation {scheme!r}; allowed: {', '.join(INIT_SCHEMES)}")
    if layer.bias is not None:
        layer.bias.zero_()


def initialize(model: nn.Module, init: str = "torch_default", head_init: str | None = None) -> nn.Module:
    """Apply `init` to every Linear/Conv layer of the body, then `head_init` (default `init`) to the classifier."""
    head = getattr(model, "classifier", None)
    for module in model.modules():
        if isinstance(module, WEIGHTED_LAYERS) and module is not head:
            init_layer(module, init)
    if isinstance(head, WEIGHTED_LAYERS):
        init_layer(head, head_init or init)
    return model
