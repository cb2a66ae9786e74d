"""Private, heterogeneous models: what every method that keeps each client's model on the client shares
(FedProto, FedSA, LG-FedAvg, FedGen, FML, FedKD, FedDistill, FedTGP, FedGH; no algorithm is registered here).

- Client i trains architecture `family_member(family, i)` (or, with `homogeneous_model`, the config's model) with
  its own head; same-architecture clients start from the same weights, seeded from setup.seed (HtFLlib's
  `torch.manual_seed(0)` per client). The model is kept in the client state as a state dict and rebuilt in a
  per-process model per architecture. All architectures share one `feature_dim` (docs/methods/fedproto.md).
- Evaluation: every client's private model on its own test split, sample-weighted, by the method's rules
  (`prediction_rules`); "acc" is the method's `headline` rule. A method whose clients adopt a shared part before
  they are evaluated (HtFLlib's `send_parameters` before `evaluate`: LG-FedAvg's head) says so in `evaluated_state`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
from pydantic import Field, field_validator

from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    HyperParams,
    RoundContext,
    State,
    evaluating,
    state_of,
)
from tasks.algorithms.engines import model_refusal
from tasks.models import MODELS, FLModel
from tasks.models.family import MODEL_FAMILIES, family_member

HEAD_PREFIX = "classifier."  # every family member's head is an nn.Linear named `classifier`


class PrivateModelParams(HyperParams):
    family: str = Field("fedsa_digits", description="model family: client i trains member i mod its size")
    homogeneous_model: bool = Field(False, description="every client trains the config's model (homogeneous control)")

    @field_validator("family")
    @classmethod
    def known_family(cls, v: str) -> str:
        if v not in MODEL_FAMILIES:
            raise ValueError(f"unknown model family; allowed: {', '.join(sorted(MODEL_FAMILIES))}")
        return v


def head_of(state: State) -> State:
    """The head's tensors of a model state (the `classifier.*` entries)."""
    return {k: v for k, v in state.items() if k.startswith(HEAD_PREFIX)}


class PrivateModels(Algorithm):
    """Client models that never leave the client; the server half is the method's."""

    Params = PrivateModelParams
    personalized = True
    has_global_model = False
    headline: ClassVar[str] = "head"  # the prediction rule reported as "acc"

    def __init__(self, params, setup):
        super().__init__(params, setup)
        self.architectures = sorted({self.architecture(i) for i in range(setup.num_clients)})
        dims = {a: self.private_model(a).feature_dim for a in self.architectures}
        if len(set(dims.values())) != 1:
            raise ValueError(f"{self.name}: the clients' models must share one feature_dim, got {dims}")
        self.feature_dim = next(iter(dims.values()))

    # ------------------------------------------------------------------ private models
    def architecture(self, client_id: int) -> str:
        if self.params.homogeneous_model:
            return self.setup.model_name
        return family_member(self.params.family, client_id)

    def member_options(self, arch: str) -> dict:
        """The config model's options that this architecture declares (feature_dim, classifier_bias, ...)."""
        declared = MODELS.get(arch).params.model_fields
        return {k: v for k, v in self.setup.model_options.items() if k in declared}

    def private_model(self, arch: str, state=None, device=None, key=None) -> FLModel:
        """The per-process working model of one architecture (under `key`, another instance of it: FML's shared
        model beside a private one of the same architecture), loaded with a client's state dict."""
        return self._cached_model(arch if key is None else key,
                                 lambda: self.new_model(name=arch, options=self.member_options(arch)), state, device)

    def working_model(self, state=None, key="global", device=None) -> FLModel:
        """An architecture's model where `key` names one (the engines' model_key), else the base's."""
        if key in self.architectures:
            return self.private_model(key, state, device)
        return super().working_model(state, key, device)

    def vectorized_refusal(self) -> str:
        return next(filter(None, (model_refusal(self.private_model(a)) for a in self.architectures)), "")

    # ------------------------------------------------------------------ client half
    def initial_model(self, client_id: int) -> State:
        """Client `client_id`'s model before any training (the same for every client of its architecture)."""
        arch = self.architecture(client_id)
        return state_of(self.new_model(name=arch, options=self.member_options(arch)))

    def init_client(self, data: ClientData):
        return {"model": self.initial_model(data.client_id)}

    # ------------------------------------------------------------------ personalized evaluation
    def prediction_rules(self, payload) -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
        """rule -> (features, logits) -> predicted labels."""
        return {"head": lambda h, logits: logits.argmax(dim=1)}

    def evaluated_state(self, payload, client_state) -> State:
        """The private model as it is evaluated: the client's own (a method whose clients adopt a shared part
        first overrides this)."""
        return client_state["model"]

    def client_evaluate(self, payload, data: ClientData, client_state, ctx: RoundContext):
        model = self.private_model(self.architecture(data.client_id), self.evaluated_state(payload, client_state),
                                   ctx.device)
        h, logits = eval_outputs(model, data.x_test.to(ctx.device))
        y = data.y_test.to(h.device)
        out = {rule: (int((predict(h, logits) == y).sum()), len(y))
               for rule, predict in self.prediction_rules(payload).items()}
        return {"acc": out[self.headline], **out}


@torch.no_grad()
def eval_outputs(model: FLModel, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Features and logits in eval mode (BatchNorm on running statistics), one forward pass."""
    with evaluating(model):
        return model(x, return_features=True)
