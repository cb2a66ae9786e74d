"""What the personalized methods share: a model's body and head by state key, the personalized model as FedNH's
protocol builds it, and the personalized metrics.

- Body and head: the head is the model's `classifier` (every FLModel has one), the body everything else.
- The personalized model (docs/methods/fednh.md §5.1, §12.1): by default the model one local update from the
  current global state and the client's own state gives, trained for the evaluation and not kept (`final_update`:
  after the last round every client runs one ClientUpdate from the final global model, FedPer with its own head);
  `latest` is the model the client's last participation left (the paper's code, evaluated on the round's clients).
  The update draws its batches from a stream of its own, so evaluating never moves a client's training draws.
- Metrics: accuracy on the client's own test split ("acc"), and the paper's PM(L) and PM(V) on the global test set
  as the client sees it, weighted per class by its training label frequencies / by the presence of the class
  (docs/methods/fednh.md §5.2).
"""
from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from tasks.algorithms.base import (
    ClientData,
    HyperParams,
    LocalObjective,
    RoundContext,
    State,
    evaluating,
    seeded_generator,
    state_of,
    train_phases,
)

HEAD = "classifier."
FINAL_UPDATE_STREAM = 0xF1A


def head_of(state: State) -> State:
    return {k: v for k, v in state.items() if k.startswith(HEAD)}


def body_of(state: State) -> State:
    return {k: v for k, v in state.items() if not k.startswith(HEAD)}


class InitialHead:
    """θ⁰'s head, built from the run seed wherever it is needed (the same tensors on the server and every client:
    nothing to send). A mixin over an Algorithm."""

    def initial_head(self) -> State:
        head = getattr(self, "_initial_head", None)
        if head is None:
            head = self._initial_head = head_of(self.init_global()["model"])
        return head


# ----------------------------------------------------------------------------------- metrics (§5.2)
@torch.no_grad()
def predictions(model: nn.Module, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    with evaluating(model):
        return torch.cat([model(x[i:i + batch_size]).argmax(dim=1).cpu() for i in range(0, len(x), batch_size)])


def weighted_correct(correct: torch.Tensor, y: torch.Tensor, class_weight: torch.Tensor) -> tuple[float, float]:
    """(Σ_j α(y_j)·1[ŷ_j = y_j], Σ_j α(y_j)): docs/methods/fednh.md §5.2's weighted accuracy as a (correct, total) pair."""
    w = class_weight.double()[y]
    return float((w * correct.double()).sum()), float(w.sum())


def pm_accuracies(correct: torch.Tensor, y: torch.Tensor, data: ClientData) -> dict[str, tuple[float, float]]:
    """PM(L) and PM(V) of predictions on the global test set (`correct` per sample, `y` its labels): weighted per
    class by the client's training label frequencies / by the presence of the class (docs/methods/fednh.md §5.2)."""
    counts = data.class_counts().double().cpu()
    return {"pm_l": weighted_correct(correct, y, counts / counts.sum().clamp_min(1.0)),
            "pm_v": weighted_correct(correct, y, (counts > 0).double())}


def personalized_accuracies(model: nn.Module, data: ClientData, device=None) -> dict[str, tuple[float, float]]:
    """acc on the client's own test split; PM(L) and PM(V) on the global test set as the client sees it."""
    to = (lambda t: t.to(device)) if device is not None else (lambda t: t)
    out = {}
    if len(data.y_test):  # §12.1 trains on all client data: no own split, PM on the global test set only
        own = predictions(model, to(data.x_test)) == data.y_test.cpu()
        out["acc"] = (float(own.sum()), float(len(own)))
    if data.global_x_test is not None:
        y = data.global_y_test.cpu()
        out.update(pm_accuracies(predictions(model, to(data.global_x_test)) == y, y, data))
    return out


# -------------------------------------------------------------------------- the personalized model
class PersonalEvalParams(HyperParams):
    personal_model: Literal["final_update", "latest"] = Field(
        "final_update", description="the model a client's personalized accuracy is measured on: one local update from "
        "the current global state and its own, not kept (docs/methods/fednh.md §12.1), or the model its last "
        "participation left (§5.1)")


def final_update_context(ctx: RoundContext, client_id: int) -> RoundContext:
    """The evaluation's update draws from a stream of its own: the client's training draws stay as they were."""
    generator = seeded_generator(ctx.seed, FINAL_UPDATE_STREAM, ctx.round, client_id)
    return dataclasses.replace(ctx, generator=generator, recorded=None)


class PersonalizedModel:
    """Personalized evaluation on the model `params.personal_model` names (a mixin over an Algorithm whose Params
    derive from PersonalEvalParams). A method says which full model state its client's last participation left
    (`latest_personal_state`) and, where its prediction is not its model's forward, how it predicts
    (`personal_predictor`: FedRoD adds its personal head's logits)."""

    personalized = True

    def client_evaluate(self, payload, data: ClientData, client_state, ctx: RoundContext):
        if self.params.personal_model == "latest":
            state = self.latest_personal_state(payload, client_state)
        else:
            state = self.updated_state(payload, data, client_state, ctx)
        return personalized_accuracies(self.personal_predictor(state, ctx.device), data, ctx.device)

    def updated_state(self, payload, data: ClientData, client_state, ctx: RoundContext) -> State:
        """§12.1: the model state one local update from the payload and the client's state gives (kept nowhere)."""
        ctx = final_update_context(ctx, data.client_id)
        objective = self.final_objective(payload, data, client_state, ctx)
        model = self.working_model(objective.start, key=objective.model_key, device=ctx.device)
        train_phases(model, data, ctx, self.local_loss, objective)
        return state_of(model)

    def final_objective(self, payload, data: ClientData, client_state, ctx: RoundContext) -> LocalObjective:
        """The update that makes the personalized model: a round's (FedBABU: its fine-tune)."""
        return self.local_objective(payload, data, client_state, ctx)

    def latest_personal_state(self, payload, client_state) -> State:
        """The model the client's last participation left; the global model before it has trained."""
        return client_state.get("model", payload.get("model"))

    def personal_predictor(self, state: State, device) -> nn.Module:
        return self.working_model(state, key="personal", device=device)
