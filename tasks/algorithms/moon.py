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

Engines: the loss is a `local_loss`, so MOON trains on both engines. The two frozen models are forward passes
of the model's architecture under the payload's and the client's previous tensors (`frozen_features`), inputs
of the client's objective: shared by every client (the global model) or stacked per client (the previous one).

The spec's baselines (docs/methods/feddebias.md §8, §10.2) use τ = 0.5 and μ ∈ {0.01, 1}; the default μ = 1 is the MOON
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
    LocalObjective,
    RoundContext,
    State,
    batch_mean,
    cross_entropy,
    frozen_features,
    on_device,
    searchable,
)
from tasks.algorithms.registry import register


class MoonParams(HyperParams):
    mu: float = searchable(1.0, 0.01, 5.0, log=True, ge=0, description="μ: weight of the model-contrastive loss")
    tau: float = searchable(0.5, 0.1, 1.0, gt=0, description="τ: temperature (divides the cosine similarity)")


def two_logit_contrastive(pos_logit: torch.Tensor, neg_logit: torch.Tensor,
                          weight: torch.Tensor | None = None) -> torch.Tensor:
    """mean_j −log(e^{pos_j} / (e^{pos_j} + e^{neg_j})) = mean_j softplus(neg_j − pos_j): one positive and
    one negative per anchor (MOON; FedDebias' L_con); `weight` masks padding (base.batch_mean)."""
    values = F.softplus(neg_logit - pos_logit)
    return values.mean() if weight is None else batch_mean(values, weight)


def moon_loss(z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, tau: float,
              weight: torch.Tensor | None = None) -> torch.Tensor:
    """ℓ_con: positive = (z, z_glob), negative = (z, z_prev), cosine similarities divided by τ."""
    return two_logit_contrastive(F.cosine_similarity(z, z_glob, dim=1) / tau,
                                 F.cosine_similarity(z, z_prev, dim=1) / tau, weight)


def previous_local_model(client_state: State, payload: State) -> State:
    """The client's previous local model; the received global model on its first participation."""
    return client_state.get("prev_model", payload["model"])


FROZEN_MODELS = {"global": "moon_global", "prev": "moon_prev"}  # input -> the per-process model it runs through


@register
class Moon(Algorithm):
    name = "moon"
    Params = MoonParams

    def local_objective(self, payload, data: ClientData, client_state, ctx: RoundContext):
        frozen = {"global": payload["model"], "prev": previous_local_model(client_state, payload)}
        for key in FROZEN_MODELS.values():  # built here, not under vmap; their own weights are never used
            self.working_model(key=key, device=ctx.device)
        return LocalObjective(start=payload["model"], inputs={k: on_device(v, ctx.device) for k, v in frozen.items()})

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        """CE + μ·ℓ_con, z_glob and z_prev from the frozen global and previous local models on the same x."""
        z_glob, z_prev = (frozen_features(self._model_cache[FROZEN_MODELS[k]], inputs[k], x) for k in ("global", "prev"))
        return cross_entropy(logits, y, weight) + self.params.mu * moon_loss(h, z_glob, z_prev, self.params.tau, weight)

    def client_result(self, trained, train_loss, payload, data: ClientData, client_state, ctx: RoundContext):
        update = ClientUpdate(data.client_id, data.num_samples, tensors=trained, metrics={"train_loss": train_loss})
        return update, {**client_state, "prev_model": trained}
