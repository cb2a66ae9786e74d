"""Shape checks and small building blocks shared by the image models (cnn, resnet, vgg, htfe, family)."""
from __future__ import annotations

import math

import torch
from torch import nn


def image_shape(input_shape: tuple[int, ...], model: str, min_side: int = 1) -> tuple[int, int, int]:
    """`input_shape` as (C, H, W), or a ValueError naming the model when it is not an image that large."""
    if len(input_shape) != 3 or min(input_shape[1:]) < min_side:
        got = "x".join(map(str, input_shape))
        raise ValueError(f"model {model!r} takes C×H×W images with H, W ≥ {min_side}, the data has {got}")
    c, h, w = input_shape
    return c, h, w


def flat_size(body: nn.Module, shape: tuple[int, int, int], model: str) -> int:
    """The number of values `body` outputs per sample, found by a dry run (so no size is hard-coded)."""
    try:
        with torch.no_grad():
            size = math.prod(body(torch.zeros(1, *shape)).shape[1:])
    except RuntimeError as err:  # a kernel larger than the shrunken image
        raise ValueError(f"model {model!r} cannot take {'x'.join(map(str, shape))} inputs: {err}") from err
    if size == 0:
        raise ValueError(f"model {model!r} shrinks {'x'.join(map(str, shape))} inputs to nothing")
    return size


def norm_layer(kind: str, channels: int, groups: int = 2, flat: bool = False) -> nn.Module:
    """'batch', 'group' (GroupNorm, `groups` groups) or 'none'; `flat` for (N, C) rather than (N, C, H, W)."""
    if kind == "batch":
        return nn.BatchNorm1d(channels) if flat else nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(groups, channels)
    return nn.Identity()
