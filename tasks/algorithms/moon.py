"""MOON (Li, He, Song 2021): model-contrastive federated learning.

Local objective: CE(ω(z), y) + μ·ℓ_con, with

    ℓ_con = −log[ exp(sim(z, z_glob)/τ) / (exp(sim(z, z_glob)/τ) + exp(sim(z, z_prev)/τ)) ]

on the same real input x: z from the model being trained, z_glob from the round's global model, z_prev from
this client's previous local model (both frozen); sim is cosine similarity and τ divides it. On a client's
first participation the previous local model is the received global model (as in the MOON code). The
previous local model is the client's persistent state. Aggregation is FedAvg's sample-weighted average.

Representation: MOON contrasts the output of a projection head that is part of its model. On the FLModel
contract that is the penultimate feature h = features(x) (the digits MLP's last hidden layer plays the
head's role), so z, z_glob and z_prev are the three models' `features(x)`.

The spec's baselines (feddebias.md §8, §10.2) use τ = 0.5 and μ ∈ {0.01, 1}; the default μ = 1 is the MOON
code's default.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    ClientUpdate,
    HyperParams,
    RoundContext,
    State,
    searchable,
    state_of,
    train_supervised,
)
from tasks.algorithms.registry import register


class MoonParams(HyperParams):
    mu: float = searchable(1.0, 0.01, 5.0, log=True, ge=0, description="μ: weight of the model-contrastive loss")
    tau: float = searchable(0.5, 0.1, 1.0, gt=0, description="τ: temperature (divides the cosine similarity)")


def two_logit_contrastive(pos_logit: torch.Tensor, neg_logit: torch.Tensor) -> torch.Tensor:
    """mean_j −log(e^{pos_j} / (e^{pos_j} + e^{neg_j})) = mean_j softplus(neg_j − pos_j): one positive and
    one negative per anchor (MOON; FedDebias' L_con)."""
    return F.softplus(neg_logit - pos_logit).mean()


def moon_loss(z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, tau: float) -> torch.Tensor:
    """ℓ_con: positive = (z, z_glob), negative = (z, z_prev), cosine similarities divided by τ."""
    return two_logit_contrastive(F.cosine_similarity(z, z_glob, dim=1) / tau,
                                 F.cosine_similarity(z, z_prev, dim=1) / tau)


def previous_local_model(client_state: State, payload: State) -> State:
    """The client's previous local model; the received global model on its first participation."""
    return client_state.get("prev_model", payload["model"])


@register
class Moon(Algorithm):
    name = "moon"
    Params = MoonParams
    not_vectorized = "its term needs two more forward passes per batch (the global and the previous local model)"

    def client_update(self, payload: State, data: ClientData, client_state: State, ctx: RoundContext):
        model = self.working_model(payload["model"], device=ctx.device)
        global_model = self.working_model(payload["model"], key="moon_global", device=ctx.device).eval()
        prev_model = self.working_model(previous_local_model(client_state, payload), key="moon_prev",
                                        device=ctx.device).eval()
        mu, tau = self.params.mu, self.params.tau

        def contrastive_term(_model, x, _y, h, _logits):
            with torch.no_grad():
                z_glob, z_prev = global_model.features(x), prev_model.features(x)
            return mu * moon_loss(h, z_glob, z_prev, tau)

        loss = train_supervised(model, data, ctx, extra_loss=contrastive_term)
        local = state_of(model)
        return ClientUpdate(data.client_id, data.num_samples, tensors=local,
                            metrics={"train_loss": loss}), {**client_state, "prev_model": local}
