"""Small models sized for 8×8 digits (and any flat input): an MLP, a CNN, and the CNN with BatchNorm (FedBN).

The MLP is the reproduction model of docs/methods/fedfa.md §11 (64 → 128 → 64, ReLU) with configurable widths,
so the other specs' digits protocols (docs/methods/fedfm.md §12: 64 → 64 → 32; docs/methods/fednh.md §12; docs/methods/feddebias.md §10.2) are
the same model with other `hidden` / `feature_dim`.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from tasks.models.base import FLModel, ModelParams, Width, register_model
from tasks.models.image import image_shape


class MLPParams(ModelParams):
    hidden: list[Width] = [128]
    feature_dim: Width = 64
    final_relu: bool = True  # ReLU after the feature layer (FedNH's positive-orthant flag)
    classifier_bias: bool = True


class MLP(FLModel):
    def __init__(self, input_shape: tuple[int, ...], num_classes: int, params: MLPParams):
        super().__init__()
        widths = [math.prod(input_shape), *params.hidden, params.feature_dim]
        layers: list[nn.Module] = [nn.Flatten()]
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(widths) - 2 or params.final_relu:
                layers.append(nn.ReLU())
        self.body = nn.Sequential(*layers)
        self.feature_dim = params.feature_dim
        self.num_classes = num_classes
        self.classifier = nn.Linear(params.feature_dim, num_classes, bias=params.classifier_bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def can_stack_forward(self) -> bool:
        cls = type(self)
        return (cls.features is MLP.features and cls.forward is FLModel.forward
                and cls.stacked_forward is MLP.stacked_forward)

    def stacked_forward(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The body's Linear layers as batched matrix products over the clients, ReLU as it is; Flatten keeps each
        client's batch dimension."""
        h = x.reshape(x.shape[0], x.shape[1], -1)
        for name, layer in self.body.named_children():
            if isinstance(layer, nn.Linear):
                h = stacked_linear(h, params[f"body.{name}.weight"], params.get(f"body.{name}.bias"))
            elif isinstance(layer, nn.ReLU):
                h = torch.relu(h)
        return h, stacked_linear(h, params["classifier.weight"], params.get("classifier.bias"))


def stacked_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """nn.Linear for K clients: x [K, B, in], weight [K, out, in], bias [K, out] → [K, B, out]."""
    if bias is None:
        return torch.bmm(x, weight.transpose(1, 2))
    return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


class DigitsCNNParams(ModelParams):
    channels: list[Width] = [16, 32]
    feature_dim: Width = 64
    classifier_bias: bool = True


class DigitsCNN(FLModel):
    """Conv(1,16,3,p1)-ReLU-Conv(16,32,3,p1)-ReLU-MaxPool2 → FC-ReLU = h → FC (docs/methods/fedfa.md §11)."""

    registered_as = "digits_cnn"  # the model's name in errors

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, params: DigitsCNNParams):
        super().__init__()
        c, h, w = image_shape((1, *input_shape) if len(input_shape) == 2 else tuple(input_shape), self.registered_as,
                              min_side=2)
        self._shape = (c, h, w)
        convs: list[nn.Module] = []
        in_ch = c
        for out_ch in params.channels:
            convs += [nn.Conv2d(in_ch, out_ch, 3, padding=1), nn.ReLU()]
            in_ch = out_ch
        convs.append(nn.MaxPool2d(2))
        self.conv = nn.Sequential(*convs)
        flat = in_ch * (h // 2) * (w // 2)
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(flat, params.feature_dim), nn.ReLU())
        self.feature_dim = params.feature_dim
        self.num_classes = num_classes
        self.classifier = nn.Linear(params.feature_dim, num_classes, bias=params.classifier_bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x.reshape(-1, *self._shape)))


class DigitsCNNBN(DigitsCNN):
    """DigitsCNN with BatchNorm after every convolution and the feature layer (conv-BN-ReLU, FC-BN-ReLU), the
    layout of FedBN's digits CNN (docs/methods/fedbn.md): the model FedBN keeps the BatchNorm layers of."""

    registered_as = "digits_cnn_bn"

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, params: DigitsCNNParams):
        super().__init__(input_shape, num_classes, params)
        convs: list[nn.Module] = []
        for layer in self.conv:
            convs.append(layer)
            if isinstance(layer, nn.Conv2d):
                convs.append(nn.BatchNorm2d(layer.out_channels))
        self.conv = nn.Sequential(*convs)
        flatten, linear, relu = self.fc
        self.fc = nn.Sequential(flatten, linear, nn.BatchNorm1d(params.feature_dim), relu)


register_model("mlp", MLPParams)(MLP)
register_model("digits_cnn", DigitsCNNParams)(DigitsCNN)
register_model("digits_cnn_bn", DigitsCNNParams)(DigitsCNNBN)
