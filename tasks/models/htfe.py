"""FedSA's heterogeneous feature extractors (HtFE), scaled down for CPU runs (docs/methods/fedsa.md §1, §6).

HtFE8 is {4-layer CNN, GoogLeNet, MobileNetV2, ResNet18, ResNet34, ResNet50, ResNet101, ResNet152} and HtFE5
adds ResNet10. Here: the 4-layer CNN with the code's sizes at `width: 16`, and small GoogLeNet-, MobileNetV2-,
ResNet-10-, ResNet-18- and ResNet-34-style networks (BatchNorm, as torchvision's; ResNet-34 is torchvision's
[3, 4, 6, 3] basic blocks) whose channels are multiples of `width`. The `htfe` family is five of them; HtFE2
({4-layer CNN, ResNet18}) and HtFE3 ({ResNet10, ResNet18, ResNet34}) are the paper's own groups, in the order
of FedSA's and HtFLlib's `main.py` (client i gets member i mod size; FML and FedKD share member 0).
As in the code (`BaseHeadSplit`), each backbone's pooled, post-ReLU output is averaged down to `feature_dim`
by `AdaptiveAvgPool1d`: there is no trainable projection, and every member's h is non-negative.
"""
from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from tasks.models.base import FLModel, ModelParams, register_model
from tasks.models.image import flat_size, image_shape
from tasks.models.resnet import resnet_body


class HtFEParams(ModelParams):
    feature_dim: int = Field(default=64, ge=1)
    width: int = Field(default=16, ge=4)  # backbones end 8·width wide, which must be ≥ feature_dim
    classifier_bias: bool = True


class HtFEMember(FLModel):
    """A backbone giving post-ReLU vectors `body_dim` wide, averaged down to `feature_dim`, then the head."""

    def __init__(self, name: str, body: nn.Module, body_dim: int, num_classes: int, params: HtFEParams):
        super().__init__()
        if params.feature_dim > body_dim:
            too_wide = f"feature_dim {params.feature_dim} > backbone width {body_dim}"
            raise ValueError(f"{name}: {too_wide}; raise `width`")
        self.body = body
        self.pool = nn.AdaptiveAvgPool1d(params.feature_dim)  # on (N, body_dim), read as (C, L): one row each
        self.feature_dim = params.feature_dim
        self.num_classes = num_classes
        self.classifier = nn.Linear(params.feature_dim, num_classes, bias=params.classifier_bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.body(x))


def conv_bn(
    in_ch: int, out_ch: int, kernel: int, stride: int = 1, groups: int = 1, act: type | None = nn.ReLU
) -> nn.Sequential:
    """Conv (same padding) → BatchNorm → `act` (None: no activation, MobileNetV2's linear bottleneck)."""
    conv = nn.Conv2d(in_ch, out_ch, kernel, stride, kernel // 2, groups=groups, bias=False)
    layers = [conv, nn.BatchNorm2d(out_ch)]
    return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)


class Inception(nn.Module):
    """GoogLeNet's four parallel branches: 1×1, 1×1→3×3, 1×1→3×3 (torchvision's "5×5"), pool→1×1."""

    def __init__(self, in_ch: int, b1: int, b2: tuple[int, int], b3: tuple[int, int], b4: int):
        super().__init__()
        self.branches = nn.ModuleList([
            conv_bn(in_ch, b1, 1),
            nn.Sequential(conv_bn(in_ch, b2[0], 1), conv_bn(b2[0], b2[1], 3)),
            nn.Sequential(conv_bn(in_ch, b3[0], 1), conv_bn(b3[0], b3[1], 3)),
            nn.Sequential(nn.MaxPool2d(3, 1, 1), conv_bn(in_ch, b4, 1)),
        ])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], dim=1)


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1×1 expand → depthwise 3×3 → linear 1×1, with a skip when shapes allow."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, expand: int):
        super().__init__()
        hidden = in_ch * expand
        layers = [conv_bn(in_ch, hidden, 1, act=nn.ReLU6)] if expand > 1 else []
        layers += [
            conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
            conv_bn(hidden, out_ch, 1, act=None),
        ]
        self.block = nn.Sequential(*layers)
        self.skip = stride == 1 and in_ch == out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.skip else out


def cnn4(in_ch: int, w: int) -> nn.Sequential:
    """FedAvgCNN without its flatten-size Linear: conv5×5(c→2w)-ReLU-pool2, conv5×5(2w→4w)-ReLU-pool2."""
    return nn.Sequential(
        nn.Conv2d(in_ch, 2 * w, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(2 * w, 4 * w, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
    )


def googlenet(in_ch: int, w: int) -> nn.Sequential:
    return nn.Sequential(
        conv_bn(in_ch, 2 * w, 3),
        Inception(2 * w, w, (w, 2 * w), (w // 4, w // 2), w // 2),  # 4w channels out
        nn.MaxPool2d(3, 2, 1),
        Inception(4 * w, 2 * w, (2 * w, 4 * w), (w // 2, w), w),  # 8w channels out
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )


def mobilenet(in_ch: int, w: int) -> nn.Sequential:
    return nn.Sequential(
        conv_bn(in_ch, w, 3, act=nn.ReLU6),
        InvertedResidual(w, w, 1, 1),
        InvertedResidual(w, 3 * w // 2, 2, 6),
        InvertedResidual(3 * w // 2, 3 * w // 2, 1, 6),
        InvertedResidual(3 * w // 2, 2 * w, 2, 6),
        InvertedResidual(2 * w, 4 * w, 2, 6),
        conv_bn(4 * w, 8 * w, 1, act=nn.ReLU6),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )


def build_cnn4(input_shape: tuple[int, ...], num_classes: int, params: HtFEParams) -> HtFEMember:
    shape = image_shape(input_shape, "htfe_cnn")
    conv = cnn4(shape[0], params.width)
    body = nn.Sequential(conv, nn.Linear(flat_size(conv, shape, "htfe_cnn"), params.feature_dim), nn.ReLU())
    return HtFEMember("htfe_cnn", body, params.feature_dim, num_classes, params)


def build_googlenet(input_shape: tuple[int, ...], num_classes: int, params: HtFEParams) -> HtFEMember:
    in_ch = image_shape(input_shape, "htfe_googlenet")[0]
    return HtFEMember("htfe_googlenet", googlenet(in_ch, params.width), 8 * params.width, num_classes, params)


def build_mobilenet(input_shape: tuple[int, ...], num_classes: int, params: HtFEParams) -> HtFEMember:
    in_ch = image_shape(input_shape, "htfe_mobilenet")[0]
    return HtFEMember("htfe_mobilenet", mobilenet(in_ch, params.width), 8 * params.width, num_classes, params)


def resnet_builder(name: str, blocks: list[int]):
    def build(input_shape: tuple[int, ...], num_classes: int, params: HtFEParams) -> HtFEMember:
        in_ch = image_shape(input_shape, name)[0]
        body = resnet_body(in_ch, blocks, params.width, nn.BatchNorm2d)
        return HtFEMember(name, body, 8 * params.width, num_classes, params)

    return build


HTFE_BUILDERS = {
    "htfe_cnn": build_cnn4,
    "htfe_googlenet": build_googlenet,
    "htfe_mobilenet": build_mobilenet,
    "htfe_resnet10": resnet_builder("htfe_resnet10", [1, 1, 1, 1]),
    "htfe_resnet18": resnet_builder("htfe_resnet18", [2, 2, 2, 2]),
    "htfe_resnet34": resnet_builder("htfe_resnet34", [3, 4, 6, 3]),
}
HTFE_MEMBERS = ["htfe_cnn", "htfe_googlenet", "htfe_mobilenet", "htfe_resnet10", "htfe_resnet18"]
HTFE2_MEMBERS = ["htfe_cnn", "htfe_resnet18"]
HTFE3_MEMBERS = ["htfe_resnet10", "htfe_resnet18", "htfe_resnet34"]

for _name, _build in HTFE_BUILDERS.items():
    register_model(_name, HtFEParams)(_build)
