"""The model contract every method relies on: a feature extractor and a linear classifier, apart.

`forward(x) == classifier(features(x))`. `features` returns the penultimate features h (dimension
`feature_dim`); `classifier` is the last linear layer (FedFA calibrates it alone, FedNH replaces it with
prototypes, FedSA keeps it private).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import torch
from pydantic import ConfigDict, Field
from torch import nn

from tasks.models.init import initialize
from tasks.registry import Registry
from tasks.typed_values import TypedValues


class FLModel(nn.Module):
    feature_dim: int
    num_classes: int
    classifier: nn.Linear

    def features(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, return_features: bool = False):
        """Logits; with `return_features`, (h, logits) from one pass (the engines' functional forward)."""
        h = self.features(x)
        logits = self.classifier(h)
        return (h, logits) if return_features else logits

    def can_stack_forward(self) -> bool:
        """Whether `stacked_forward` computes this model's forward (a subclass that changes the forward must not
        inherit a parent's): the vectorized engine then trains it without vmap (tasks/algorithms/stacked.py)."""
        return False

    def stacked_forward(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(h, logits) of K models at once: `params` every state tensor stacked [K, ...], `x` [K, B, ...] (client k's
        batch under its own parameters), equal to `torch.func.vmap` of `forward(x, return_features=True)` under
        `functional_call`. Models that give it say so in `can_stack_forward`."""
        raise NotImplementedError(f"{type(self).__name__} has no stacked forward")

    def extractor_parameters(self) -> list[nn.Parameter]:
        head = {id(p) for p in self.classifier.parameters()}
        return [p for p in self.parameters() if id(p) not in head]


# a layer's width, channels or feature dimension: a layer of none divides by zero when it is initialised
Width = Annotated[int, Field(ge=1)]


class ModelParams(TypedValues):
    """A model's own options in the config; subclasses add fields. Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


@dataclass(frozen=True)
class ModelEntry:
    build: Any  # (input_shape, num_classes, params) -> FLModel
    params: type[ModelParams]
    input_shapes: tuple[tuple[int, ...], ...] | None = None  # None: any input shape


def not_a_model(obj: object) -> str | None:
    return None if isinstance(obj, ModelEntry) else "not a ModelEntry (tasks.models.base.ModelEntry)"


MODELS: Registry[ModelEntry] = Registry("model", "mooring.models", not_a_model)


def register_model(name: str, params: type[ModelParams] = ModelParams, input_shapes=None):
    def add(build):
        MODELS.register(name)(ModelEntry(build, params, input_shapes))
        return build

    return add


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, options: dict | None = None,
                init: str = "torch_default", head_init: str | None = None) -> FLModel:
    """Build a registered model; `options` are validated against its params schema; then `initialize` it
    (tasks/models/init.py) with `init` for the body and `head_init` (default `init`) for the classifier."""
    entry = MODELS.get(name)
    params = entry.params(**(options or {}))
    if entry.input_shapes is not None and tuple(input_shape) not in entry.input_shapes:
        allowed = " or ".join("x".join(map(str, s)) for s in entry.input_shapes)
        raise ValueError(f"model {name!r} takes inputs of shape {allowed}, the data has {'x'.join(map(str, input_shape))}")
    return initialize(entry.build(tuple(input_shape), num_classes, params), init, head_init)
