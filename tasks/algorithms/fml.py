"""FML (Shen et al. 2020, federated mutual learning) as HtFLlib runs it (docs/methods/fml.md): a small shared model
trained by mutual learning with each client's private model.

- Shared model: client 0's architecture (the family's first member, or the config's model with
  `homogeneous_model`), seeded from setup.seed; the server holds it and sends it to the round's clients.
- Client: trains its private model (private_models.py) and the shared model together, per batch
      L  = α·CE(z, y) + (1 − α)·KL(softmax(z_g) ‖ softmax(z)),
      L_g = β·CE(z_g, y) + (1 − β)·KL(softmax(z) ‖ softmax(z_g)),
  each KL `nn.KLDivLoss()`'s mean over batch and classes, the targets not detached (HtFLlib), so one backward
  pass of L + L_g moves both models (HtFLlib's two backward calls sum to it); each model's gradient clipped to
  norm `clip_norm`, then one optimizer step each. It sends the shared model's parameters.
- Server: the unweighted mean of the parameters sent (HtFLlib's 1/|uploads|); its buffers stay the server's.
- Evaluation: each client's private model by its head.
Engines: sequential only (`not_vectorized`): a step trains two models, the engines one.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from tasks.algorithms.base import (
    ClientData,
    ClientUpdate,
    RoundContext,
    State,
    derive_seed,
    local_batches,
    make_optimizer,
    searchable,
    state_of,
)
from tasks.algorithms.optimizers import Optimizer
from tasks.algorithms.private_models import PrivateModelParams, PrivateModels
from tasks.algorithms.registry import register
from tasks.models import FLModel

SHARED_STREAM = 0xF31


class FMLParams(PrivateModelParams):
    alpha: float = searchable(0.5, 0.1, 0.9, ge=0, le=1, description="α: CE weight of the private model (-al 0.5)")
    beta: float = searchable(0.5, 0.1, 0.9, ge=0, le=1, description="β: CE weight of the shared model (-bt 0.5)")
    clip_norm: float = Field(10.0, gt=0, description="each model's gradient-norm clip (hard-coded 10 in HtFLlib)")


def kl_mean(logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """nn.KLDivLoss()(log_softmax(z), softmax(z_t)): the pointwise KL averaged over batch AND classes (its default
    reduction), the target not detached."""
    return F.kl_div(F.log_softmax(logits, dim=1), F.softmax(target_logits, dim=1), reduction="none").mean()


def optimizer_at(params, ctx: RoundContext, lr: float) -> Optimizer:
    """The run's optimizer (train.optimizer) at learning rate `lr`."""
    return make_optimizer(params, dataclasses.replace(ctx, train=dataclasses.replace(ctx.train, lr=lr,
                                                                                      schedule="constant")))


def train_jointly(modules: list[nn.Module], lrs: list[float], data: ClientData, ctx: RoundContext,
                  loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], clip_norm: float) -> float:
    """The round's batches: one loss over every module, its backward pass, each module's gradient clipped to
    `clip_norm` and stepped by its own optimizer at its own rate; the mean loss."""
    for module in modules:
        module.train()
    optimizers = [optimizer_at(m.parameters(), ctx, lr) for m, lr in zip(modules, lrs)]
    total, count = 0.0, 0
    for x, y in local_batches(data, ctx):
        loss = loss_fn(x, y)
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for module, optimizer in zip(modules, optimizers):
            nn.utils.clip_grad_norm_(module.parameters(), clip_norm)
            optimizer.step()
        total += float(loss.detach())
        count += 1
    return total / max(count, 1)


class SharedModel(PrivateModels):
    """A private model per client beside one shared model of client 0's architecture (FML, FedKD)."""

    not_vectorized = "a step trains two models (the client's private one and the shared one), the engines one"

    def shared_model(self, state=None, device=None) -> FLModel:
        """The per-process shared model (its own instance even where a client's architecture is the same)."""
        arch = self.architecture(0)
        return self.private_model(arch, state, device, key=("shared", arch))

    def initial_shared(self) -> State:
        arch = self.architecture(0)
        return state_of(self.new_model(derive_seed(self.setup.seed, SHARED_STREAM), arch, self.member_options(arch)))

    def shared_parameters(self, state: State) -> State:
        """The shared model's parameters in `state` (what is sent and averaged: HtFLlib's `parameters()`)."""
        return {name: state[name] for name, _ in self.shared_model().named_parameters()}


@register
class FML(SharedModel):
    name = "fml"
    shares = "a small shared model"
    Params = FMLParams

    # ------------------------------------------------------------------ server half
    def init_global(self):
        return {"model": self.initial_shared()}

    def payload(self, state, round_idx):
        return {"model": state["model"]}

    def aggregate(self, state, updates: list[ClientUpdate], round_idx: int):
        if not updates:
            return state
        mean = {k: torch.stack([u.tensors[k].double() for u in updates]).mean(dim=0).to(v.dtype)
                for k, v in updates[0].tensors.items()}
        return {**state, "model": {**state["model"], **mean}}

    # ------------------------------------------------------------------ client half
    def mutual_loss(self, logits: torch.Tensor, shared_logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """L + L_g (module docstring)."""
        a, b = self.params.alpha, self.params.beta
        private = a * F.cross_entropy(logits, y) + (1 - a) * kl_mean(logits, shared_logits)
        shared = b * F.cross_entropy(shared_logits, y) + (1 - b) * kl_mean(shared_logits, logits)
        return private + shared

    def client_update(self, payload, data: ClientData, client_state, ctx: RoundContext):
        private = self.private_model(self.architecture(data.client_id), client_state["model"], ctx.device)
        shared = self.shared_model(payload["model"], ctx.device)
        loss = train_jointly([private, shared], [ctx.lr, ctx.lr], data, ctx,
                             lambda x, y: self.mutual_loss(private(x), shared(x), y), self.params.clip_norm)
        update = ClientUpdate(data.client_id, data.num_samples, tensors=self.shared_parameters(state_of(shared)),
                              metrics={"train_loss": loss})
        return update, {**client_state, "model": state_of(private)}
