"""FedMix (Yoon et al., "FedMix: Approximation of Mixup under Mean Augmented Federated Learning", ICLR 2021;
docs/methods/fedmix.md): before training, every client uploads the means of its local batches (mean images with
their mean one-hot labels, each the mean of M samples); the server pools them and sends the pool down. Local
training approximates Mixup with another client's mean (x̄_j, ȳ_j) to first order, on the scaled input
(1 − λ)·x_i, without ever seeing another client's samples:

    ℓ = (1 − λ)·CE(f((1 − λ)x_i), y_i) + λ·CE_soft(f((1 − λ)x_i), ȳ_j)
        + (1 − λ)·λ·⟨∂CE(f(u), y_i)/∂u |_{u=(1−λ)x_i}, x̄_j⟩

(the paper's Eq. 5: the input-gradient term expands the (1 − λ)-weighted local term, hence its (1 − λ)). Each
local sample is paired with a mean drawn uniformly from the other clients' means at every step. The server averages
as FedAvg.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field

from tasks.algorithms.base import (
    Algorithm,
    HyperParams,
    searchable,
    seeded_generator,
    state_of,
    train_batch_loss,
)
from tasks.algorithms.feddebias import soft_cross_entropy
from tasks.algorithms.registry import register

PAIRING_STREAM = 0xF3D31


class FedMixParams(HyperParams):
    lam: float = searchable(0.1, 0.01, 0.2, log=True, gt=0, lt=1,
                            description="λ: the mixing weight (FedDebias tunes it in {0.01, 0.1, 0.2}; code 0.1)")
    mean_size: int = Field(10, ge=1, description="M: samples averaged into each uploaded mean (code: 10)")


def batch_means(x: torch.Tensor, y: torch.Tensor, num_classes: int, size: int,
                generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The client's shuffled samples cut into batches of `size` (the last, shorter one dropped unless it is the
    only one), each averaged: (mean inputs, mean one-hot labels)."""
    if not x.is_floating_point():
        raise ValueError("fedmix: its uploads are means of input samples (docs/methods/fedmix.md), and token ids "
                         "(text) have no mean; it runs on images and feature vectors only")
    order = torch.randperm(len(x), generator=generator)
    count = max(len(x) // size, 1)
    chunks = [order[i * size:(i + 1) * size] for i in range(count)]
    onehot = F.one_hot(y, num_classes).to(x.dtype)
    return torch.stack([x[c].mean(dim=0) for c in chunks]), torch.stack([onehot[c].mean(dim=0) for c in chunks])


def fedmix_loss(model, x: torch.Tensor, y: torch.Tensor, mean_x: torch.Tensor, mean_y: torch.Tensor,
                lam: float) -> torch.Tensor:
    """Eq. 5 averaged over the batch: sample i paired with the mean (mean_x[i], mean_y[i])."""
    scaled = ((1.0 - lam) * x).detach().requires_grad_(True)
    logits = model(scaled)
    ce = F.cross_entropy(logits, y)
    # ∂CE_i/∂u_i per sample: the batch mean's gradient times the batch size (sample i's loss reads only u_i)
    grad_u = torch.autograd.grad(ce, scaled, create_graph=True)[0] * len(x)
    taylor = (grad_u * mean_x).flatten(1).sum(dim=1).mean()
    return (1.0 - lam) * ce + lam * soft_cross_entropy(logits, mean_y) + (1.0 - lam) * lam * taylor


@register
class FedMix(Algorithm):
    name = "fedmix"
    shares = "the model and mean data batches"
    Params = FedMixParams
    keeps_client_state = False
    not_vectorized = ("its loss differentiates the model's output with respect to the input inside every step "
                      "(a second-order term), which the vectorised engine's functional gradient does not nest")

    # ------------------------------------------------------------------ the one-off exchange of means
    def client_setup(self, data, generator):
        if data.num_samples == 0:
            return {}
        mean_x, mean_y = batch_means(data.x, data.y, data.num_classes, self.params.mean_size, generator)
        return {"x": mean_x, "y": mean_y, "owner": torch.full((len(mean_x),), data.client_id, dtype=torch.long)}

    def server_setup(self, state, contributions):
        contributions = [c for c in contributions if c]
        if not contributions:
            return state
        return {**state, **{f"means_{k}": torch.cat([c[k] for c in contributions]) for k in ("x", "y", "owner")}}

    def payload(self, state, round_idx):
        return {k: v for k, v in state.items() if k == "model" or k.startswith("means_")}

    # ------------------------------------------------------------------ client half
    def client_update(self, payload, data, client_state, ctx):
        model = self.working_model(payload["model"], device=ctx.device)
        others = (payload["means_owner"] != data.client_id).nonzero().flatten()
        others = others if len(others) else torch.arange(len(payload["means_owner"]))
        pairing = seeded_generator(ctx.seed, ctx.round, data.client_id, PAIRING_STREAM)

        def paired_batch_loss(x, y):
            j = others[torch.randint(len(others), (len(x),), generator=pairing)]
            mean_x, mean_y = payload["means_x"][j].to(x.device), payload["means_y"][j].to(x.device)
            return fedmix_loss(model, x, y, mean_x, mean_y, self.params.lam)

        loss = train_batch_loss(model, data, ctx, paired_batch_loss)
        return self.client_result(state_of(model), loss, payload, data, client_state, ctx)
