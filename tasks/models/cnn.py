"""The papers' small image CNNs, with the layer sizes of the official code.

- `acar_cnn`: Acar et al. (FedDyn)'s 2-conv CNN, FedFA's FMNIST/EMNIST and CIFAR-10 model
  (docs/methods/fedfa.md §6.1; the code's flattened size is 512, not the paper's 992). FedNH's `Conv2Cifar`
  (docs/methods/fednh.md §7) is the 3×32×32 variant with `classifier_bias: false`; FedFA's validation models
  use `feature_dim: 100`.
- `mixed_digits_cnn`: FedBN's `DigitModel`, FedFA's Mixed-Digits model (docs/methods/fedfa.md §6.1).
- `groupnorm_cnn`: FedDebias's 4-conv GroupNorm CNN (docs/methods/feddebias.md §10.2; the code's `MNIST_CNN`, §11,
  is `channels: [64, 128, 128, 128]`).
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import nn

from tasks.models.base import FLModel, ModelParams, Width, register_model
from tasks.models.image import flat_size, image_shape, norm_layer


class AcarCNNParams(ModelParams):
    channels: Width | None = None  # None: the code's 32 for 1×28×28 inputs and 64 for 3×32×32
    hidden: Width = 384
    feature_dim: Width = 192
    classifier_bias: bool = True


class AcarCNN(FLModel):
    """Conv(c,k,5)-ReLU-MaxPool2 ×2 → FC(flat,384)-ReLU → FC(384,d)-ReLU = h → FC(d,C)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, params: AcarCNNParams):
        super().__init__()
        shape = image_shape(input_shape, "acar_cnn")
        k = params.channels or (32 if shape[0] == 1 else 64)
        self.conv = nn.Sequential(
            nn.Conv2d(shape[0], k, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(k, k, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
        )
        self.fc = nn.Sequential(
            nn.Linear(flat_size(self.conv, shape, "acar_cnn"), params.hidden), nn.ReLU(),
            nn.Linear(params.hidden, params.feature_dim), nn.ReLU(),
        )
        self.feature_dim = params.feature_dim
        self.num_classes = num_classes
        self.classifier = nn.Linear(params.feature_dim, num_classes, bias=params.classifier_bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x))


class MixedDigitsCNNParams(ModelParams):
    # FedFA's code defines GroupNorm layers but never applies them, hence "none"; FedBN's DigitModel, where
    # the model comes from, has BatchNorm after every layer but the classifier ("batch").
    norm: Literal["none", "batch", "group"] = "none"
    feature_dim: Width = 512
    classifier_bias: bool = True


class MixedDigitsCNN(FLModel):
    """Conv(c,64,5,1,2)-Pool2, Conv(64,64,5,1,2)-Pool2, Conv(64,128,5,1,2) → FC(·,2048) → FC(2048,512) = h.

    Every layer but the classifier is followed by the norm (if any), then ReLU.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, params: MixedDigitsCNNParams):
        super().__init__()
        shape = image_shape(input_shape, "mixed_digits_cnn", min_side=4)
        norm = params.norm
        self.conv = nn.Sequential(
            nn.Conv2d(shape[0], 64, 5, 1, 2), norm_layer(norm, 64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 5, 1, 2), norm_layer(norm, 64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 5, 1, 2), norm_layer(norm, 128), nn.ReLU(),
            nn.Flatten(),
        )
        flat = 128 * (shape[1] // 4) * (shape[2] // 4)  # 6272 for the spec's 3×28×28
        self.fc = nn.Sequential(
            nn.Linear(flat, 2048), norm_layer(norm, 2048, flat=True), nn.ReLU(),
            nn.Linear(2048, params.feature_dim), norm_layer(norm, params.feature_dim, flat=True), nn.ReLU(),
        )
        self.feature_dim = params.feature_dim
        self.num_classes = num_classes
        self.classifier = nn.Linear(params.feature_dim, num_classes, bias=params.classifier_bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x))


class GroupNormCNNParams(ModelParams):
    channels: list[Width] = Field(default=[16, 32, 32, 32], min_length=2)
    groups: Width = 8
    classifier_bias: bool = True

    @model_validator(mode="after")
    def _groups_divide_channels(self) -> GroupNormCNNParams:
        if any(c % self.groups for c in self.channels):
            raise ValueError(f"groups={self.groups} must divide every entry of channels={self.channels}")
        return self


class GroupNormCNN(FLModel):
    """Conv3×3-ReLU-GroupNorm per entry of `channels` (the second with stride 2) → global average pool = h."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, params: GroupNormCNNParams):
        super().__init__()
        in_ch = image_shape(input_shape, "groupnorm_cnn")[0]
        layers: list[nn.Module] = []
        for i, out_ch in enumerate(params.channels):
            stride = 2 if i == 1 else 1
            layers += [nn.Conv2d(in_ch, out_ch, 3, stride, 1), nn.ReLU(), nn.GroupNorm(params.groups, out_ch)]
            in_ch = out_ch
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.feature_dim = in_ch
        self.num_classes = num_classes
        self.classifier = nn.Linear(in_ch, num_classes, bias=params.classifier_bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


register_model("acar_cnn", AcarCNNParams, input_shapes=((1, 28, 28), (3, 32, 32)))(AcarCNN)
register_model("mixed_digits_cnn", MixedDigitsCNNParams)(MixedDigitsCNN)
register_model("groupnorm_cnn", GroupNormCNNParams)(GroupNormCNN)
