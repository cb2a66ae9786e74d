"""Model families for heterogeneous-model methods (FedSA): client i gets member i mod len(family).

- `fedsa_digits`: the scaled-down extractors of docs/methods/fedsa.md §11, for 8×8 digits (and padded or other
  sizes; every flattened size is computed from the input shape). All end in ReLU with one `feature_dim`
  (D = 64 by default): arch 0 MLP 64→D; arch 1 MLP 64→128→D; arch 2 MLP 64→256→256→D; arch 3
  conv3×3(1→16, pad 1)-ReLU-MaxPool2 then Linear(256→D)-ReLU.
- `htfe`: five scaled-down HtFE image extractors of tasks/models/htfe.py (docs/methods/fedsa.md §6), Table 2's
  HtFE5 stand-in; `htfe2` = {CNN, ResNet-18} and `htfe3` = {ResNet-10, ResNet-18, ResNet-34}: the paper's HtFE2
  and HtFE3, scaled down the same way.
"""
from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from tasks.models.base import FLModel, ModelParams, register_model
from tasks.models.digits import MLP, MLPParams
from tasks.models.htfe import HTFE2_MEMBERS, HTFE3_MEMBERS, HTFE_MEMBERS
from tasks.models.image import flat_size, image_shape

DIGITS_MLP_HIDDEN = {0: [], 1: [128], 2: [256, 256]}


class FedSADigitsParams(ModelParams):
    feature_dim: int = Field(default=64, ge=1)
    classifier_bias: bool = True


def digits_mlp_builder(arch: int):
    def build(input_shape: tuple[int, ...], num_classes: int, params: FedSADigitsParams) -> MLP:
        image_shape(input_shape, f"fedsa_digits_{arch}")  # same inputs as the conv member
        mlp_params = MLPParams(
            hidden=DIGITS_MLP_HIDDEN[arch],
            feature_dim=params.feature_dim,
            classifier_bias=params.classifier_bias,
        )
        return MLP(input_shape, num_classes, mlp_params)

    return build


class DigitsConvMember(FLModel):
    """Arch 3: conv3×3(C→16, pad 1)-ReLU-MaxPool2 → Linear(16·(H/2)·(W/2) → D)-ReLU = h."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, params: FedSADigitsParams):
        super().__init__()
        shape = image_shape(input_shape, "fedsa_digits_3", min_side=2)
        conv = nn.Sequential(nn.Conv2d(shape[0], 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        fc = nn.Linear(flat_size(conv, shape, "fedsa_digits_3"), params.feature_dim)
        self.body = nn.Sequential(conv, fc, nn.ReLU())
        self.feature_dim = params.feature_dim
        self.num_classes = num_classes
        self.classifier = nn.Linear(params.feature_dim, num_classes, bias=params.classifier_bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


for _arch in DIGITS_MLP_HIDDEN:
    register_model(f"fedsa_digits_{_arch}", FedSADigitsParams)(digits_mlp_builder(_arch))
register_model("fedsa_digits_3", FedSADigitsParams)(DigitsConvMember)

MODEL_FAMILIES: dict[str, list[str]] = {
    "fedsa_digits": [f"fedsa_digits_{i}" for i in range(4)],
    "htfe": HTFE_MEMBERS,
    "htfe2": HTFE2_MEMBERS,
    "htfe3": HTFE3_MEMBERS,
}


def family_member(family: str, index: int) -> str:
    """The registered model name of member `index` (taken mod the family's size) of `family`."""
    if family not in MODEL_FAMILIES:
        raise KeyError(f"unknown model family {family!r}; allowed: {', '.join(sorted(MODEL_FAMILIES))}")
    members = MODEL_FAMILIES[family]
    return members[index % len(members)]
