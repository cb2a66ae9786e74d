"""CIFAR-style ResNets (3×3 stem, stride 1, no max-pool) and `resnet18_gn`.

`resnet18_gn` is FedFA's CIFAR-100 model (docs/methods/fedfa.md §6.1, from MOON's `resnetcifar.py`): ResNet-18
with GroupNorm(2, ·) everywhere, then the projector Linear(512,512)-ReLU-Linear(512,256), whose output
(no ReLU) is h.
With `projector: false` h is the pooled 512-d output, as in FedNH's and FedDebias's ResNet-18-GN
(docs/methods/fednh.md §7; FedNH's `no_norm` is `block_norm: false`). `resnet_body` is also used by the HtFE family.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from pydantic import model_validator
from torch import nn

from tasks.models.base import FLModel, ModelParams, Width, register_model
from tasks.models.image import image_shape

Norm = Callable[[int], nn.Module]  # channels -> normalisation layer


class BasicBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int, norm: Norm, block_norm: bool = True):
        super().__init__()
        inner = norm if block_norm else (lambda _: nn.Identity())
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.norm1 = inner(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.norm2 = inner(out_ch)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:  # keeps its norm even without block_norm (FedNH's code)
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False), norm(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.norm1(self.conv1(x)))
        return torch.relu(self.norm2(self.conv2(out)) + self.shortcut(x))


def resnet_body(
    in_ch: int, blocks: list[int], width: int, norm: Norm, block_norm: bool = True
) -> nn.Sequential:
    """Stem and stages of widths width·2^i (stride 2 from the second), then global average pooling.

    The output is post-ReLU and width·2^(len(blocks)-1) wide.
    """
    layers: list[nn.Module] = [nn.Conv2d(in_ch, width, 3, 1, 1, bias=False), norm(width), nn.ReLU()]
    ch = width
    for stage, count in enumerate(blocks):
        out_ch = width * 2**stage
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            layers.append(BasicBlock(ch, out_ch, stride, norm, block_norm))
            ch = out_ch
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())


class ResNet18GNParams(ModelParams):
    projector: bool = True
    feature_dim: Width | None = None  # None: 256 with the projector, the backbone's 8·width without
    width: Width = 64
    groups: Width = 2
    block_norm: bool = True
    classifier_bias: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> ResNet18GNParams:
        if self.width % self.groups:
            raise ValueError(f"groups={self.groups} must divide width={self.width}")
        if not self.projector and self.feature_dim not in (None, 8 * self.width):
            raise ValueError(f"without the projector feature_dim is the backbone width {8 * self.width}")
        return self

    def resolved_feature_dim(self) -> int:
        if self.feature_dim is not None:
            return self.feature_dim
        return 256 if self.projector else 8 * self.width


class ResNet18GN(FLModel):
    def __init__(self, input_shape: tuple[int, ...], num_classes: int, params: ResNet18GNParams):
        super().__init__()
        in_ch = image_shape(input_shape, "resnet18_gn")[0]
        backbone_dim = 8 * params.width
        self.body = resnet_body(
            in_ch, [2, 2, 2, 2], params.width, lambda ch: nn.GroupNorm(params.groups, ch), params.block_norm
        )
        self.feature_dim = params.resolved_feature_dim()
        self.projector: nn.Module = nn.Identity()
        if params.projector:
            self.projector = nn.Sequential(
                nn.Linear(backbone_dim, backbone_dim), nn.ReLU(), nn.Linear(backbone_dim, self.feature_dim)
            )
        self.num_classes = num_classes
        self.classifier = nn.Linear(self.feature_dim, num_classes, bias=params.classifier_bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.projector(self.body(x))


register_model("resnet18_gn", ResNet18GNParams)(ResNet18GN)
