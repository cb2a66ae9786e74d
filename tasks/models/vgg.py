"""`vgg11`: VGG-11 as FedDebias uses it on CIFAR-10 and PACS (docs/methods/feddebias.md §6).

The code's `CIFAR_Vgg` keeps torchvision `vgg11`'s convolutional layers (configuration "A", no BatchNorm) and
replaces the 4096-wide MLP head with global average pooling, so h is 512-d and the classifier is one Linear.
"""
from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from tasks.models.base import FLModel, ModelParams, register_model
from tasks.models.image import image_shape

# Output channels of each 3×3 conv as multiples of `width` (64 in VGG-11); "M" is a 2×2 max-pool.
VGG11_LAYERS: list[int | str] = [1, "M", 2, "M", 4, 4, "M", 8, 8, "M", 8, 8, "M"]


class VGG11Params(ModelParams):
    batch_norm: bool = False  # torchvision's vgg11_bn variant; the FedDebias code uses plain vgg11
    width: int = Field(default=64, ge=1)  # smaller values scale every layer down, for CPU runs
    classifier_bias: bool = True


class VGG11(FLModel):
    def __init__(self, input_shape: tuple[int, ...], num_classes: int, params: VGG11Params):
        super().__init__()
        in_ch = image_shape(input_shape, "vgg11", min_side=32)[0]  # five 2×2 pools
        layers: list[nn.Module] = []
        for entry in VGG11_LAYERS:
            if entry == "M":
                layers.append(nn.MaxPool2d(2))
                continue
            out_ch = int(entry) * params.width
            layers.append(nn.Conv2d(in_ch, out_ch, 3, padding=1))
            if params.batch_norm:
                layers.append(nn.BatchNorm2d(out_ch))
            layers.append(nn.ReLU())
            in_ch = out_ch
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.feature_dim = in_ch
        self.num_classes = num_classes
        self.classifier = nn.Linear(in_ch, num_classes, bias=params.classifier_bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


register_model("vgg11", VGG11Params)(VGG11)
