"""FedRoD (Chen and Chao, ICLR 2022): one body under two heads, a generic head trained with the balanced softmax and
shared, and a personal head each client keeps (docs/methods/fedrod.md).

- Generic part (body θ, generic head φ_G), shared: the balanced softmax loss, cross-entropy on logits shifted by the
  log of the client's class prior, z_c + log π_c with π_c = n_c/n (an absent class gets n_c = 1e-12, as FedNH's
  code), so the client learns the class-balanced p(y | x) rather than its own skew.
- Personal head φ_P, kept: cross-entropy on φ_G(h) + φ_P(h) with h and φ_G(h) detached: it learns the client's own
  skew on top of the generic prediction.
- `separate` (FedNH's scripts, default): the generic part for `train.local_epochs` passes, then the personal head for
  as many, as two Phases; false: both on each batch, one optimizer step on the sum (the paper's Algorithm 1, PFLlib).
- `personal_optimizer`: the personal head's phase steps by plain SGD at the round's rate (FedNH's `p_head_optimizer`,
  default) or by the run's optimizer; the joint step of `separate: false` is one optimizer, the run's.
- Server: the sample-weighted mean of body and generic head; GM = body + generic head. Personalized model: predicts
  φ_G(h) + φ_P(h), after one more round's update (docs/methods/fednh.md §12.1) or as left (`personal_model: latest`).
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from tasks.algorithms.base import (
    Algorithm,
    ClientUpdate,
    LocalObjective,
    Phase,
    cross_entropy,
    weighted_average,
)
from tasks.algorithms.personal import PersonalEvalParams, PersonalizedModel
from tasks.algorithms.registry import register
from tasks.models import FLModel

PERSONAL_HEAD = "personal_head."
ABSENT_COUNT = 1e-12  # FedNH's code: the count given to a class the client does not hold


class FedRoDParams(PersonalEvalParams):
    separate: bool = Field(True, description="train the personal head after the generic part, in a phase of its own "
                           "(FedNH's scripts); false: both on every batch (the paper's Algorithm 1)")
    personal_optimizer: Literal["plain_sgd", "run"] | None = Field(
        None, description="how the personal head's phase trains: plain_sgd, plain SGD at the round's learning rate (no "
        "momentum, weight decay or clipping: FedNH's p_head_optimizer), or run, train.optimizer and train.grad_clip; "
        "null: plain_sgd with separate: true, run with separate: false (one optimizer steps both heads)")

    @model_validator(mode="after")
    def personal_phase_for_plain_sgd(self):
        if self.personal_optimizer is None:
            self.personal_optimizer = "plain_sgd" if self.separate else "run"
        elif self.personal_optimizer == "plain_sgd" and not self.separate:
            raise ValueError("personal_optimizer plain_sgd needs separate: true (with separate: false one optimizer "
                             "steps both heads on every batch)")
        return self


def log_class_prior(counts: torch.Tensor) -> torch.Tensor:
    """log π_c, π_c = n_c / Σ n, an absent class counted as ABSENT_COUNT."""
    counts = counts.double().clamp_min(ABSENT_COUNT)
    return (counts / counts.sum()).log().float()


def balanced_softmax_loss(logits: torch.Tensor, y: torch.Tensor, log_prior: torch.Tensor,
                          weight: torch.Tensor | None = None) -> torch.Tensor:
    """CE(z + log π, y): the balanced softmax of Ren et al. (2020) that FedRoD's generic head is trained with."""
    return cross_entropy(logits + log_prior, y, weight)


def personal_logits(params: dict[str, torch.Tensor], h: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """φ_G(h) + φ_P(h), h and φ_G(h) detached: only the personal head learns from it."""
    return logits.detach() + F.linear(h.detach(), params[PERSONAL_HEAD + "weight"], params.get(PERSONAL_HEAD + "bias"))


class PersonalPrediction(nn.Module):
    """A FedRoD model's personalized prediction: generic plus personal logits."""

    def __init__(self, model: FLModel):
        super().__init__()
        self.model = model

    def forward(self, x):
        h, logits = self.model(x, return_features=True)
        return logits + self.model.personal_head(h)


def split(state) -> tuple[dict, dict]:
    """(the shared part: body and generic head, the personal head)."""
    shared = {k: v for k, v in state.items() if not k.startswith(PERSONAL_HEAD)}
    return shared, {k: v for k, v in state.items() if k.startswith(PERSONAL_HEAD)}


@register
class FedRoD(PersonalizedModel, Algorithm):
    name = "fedrod"
    shares = "the body and the generic head (the personal head stays)"
    Params = FedRoDParams
    keeps_client_state = True

    def new_model(self, seed=None, name=None, options=None) -> FLModel:
        """The configured model plus a personal head that starts as a copy of its generic head (the codes')."""
        model = super().new_model(seed, name, options)
        generic = model.classifier
        model.personal_head = nn.Linear(generic.in_features, generic.out_features, bias=generic.bias is not None)
        model.personal_head.load_state_dict(generic.state_dict())
        return model

    def payload(self, state, round_idx):
        return {"model": split(state["model"])[0]}

    def aggregate(self, state, updates, round_idx):
        if not updates:
            return state
        shared = weighted_average([u.tensors for u in updates], [u.num_samples for u in updates])
        return {**state, "model": {**state["model"], **shared}}

    def init_client(self, data):
        return {"personal_head": split(self.init_global()["model"])[1]}

    def local_objective(self, payload, data, client_state, ctx):
        start = {**payload["model"], **client_state["personal_head"]}
        inputs = {"log_prior": log_class_prior(data.class_counts()).to(ctx.device)}
        if not self.params.separate:
            return LocalObjective(start=start, inputs=inputs, phases=(Phase("joint"),))
        plain = self.params.personal_optimizer == "plain_sgd"
        phases = (Phase("generic", holds=(PERSONAL_HEAD,)), Phase("personal", trains=(PERSONAL_HEAD,), plain_sgd=plain))
        return LocalObjective(start=start, inputs=inputs, phases=phases)

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        """generic: BSM(φ_G(h)); personal: CE(φ_G(h) + φ_P(h)), detached; joint: their sum."""
        phase = inputs["phase"]
        loss = 0.0
        if phase in ("generic", "joint"):
            loss = loss + balanced_softmax_loss(logits, y, inputs["log_prior"], weight)
        if phase in ("personal", "joint"):
            loss = loss + cross_entropy(personal_logits(params, h, logits), y, weight)
        return loss

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        shared, head = split(trained)
        update = ClientUpdate(data.client_id, data.num_samples, tensors=shared, metrics={"train_loss": train_loss})
        return update, {"personal_head": head}

    def latest_personal_state(self, payload, client_state):
        return {**payload["model"], **client_state["personal_head"]}

    def personal_predictor(self, state, device) -> nn.Module:
        return PersonalPrediction(self.working_model(state, key="personal", device=device))
