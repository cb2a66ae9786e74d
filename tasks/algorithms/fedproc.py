"""FedProc (Mu et al. 2021, "FedProc: Prototypical Contrastive Federated Learning on Non-IID Data"): a
prototype-based contrastive local loss against global class prototypes (docs/methods/fedproc.md).

Client k in round t (of T) minimises, on each batch,

    w_t·CE(f(x), y) + (1 − w_t)·L_PC,    L_PC = −log[ exp(cos(h, p_y)/τ) / Σ_c exp(cos(h, p_c)/τ) ]

with h = features(x), p_c the global prototypes of the round (constants), w_t = (t + 1)/T (the authors' code's
α = 1 − (t + 1)/R; the paper's t/T with t counted from 1), and L_PC FedFM's contrastive guiding form
(tasks/algorithms/fedfm.py). Before any prototype exists (round 0) the loss is CE alone. After training, the client
sends its model and its per-class feature sums and counts under the trained model (fedfm.class_stats, privacy.stats
applies); the server averages the models as FedAvg does and sets p_c to the pooled class means (a class no client of
the round holds keeps its prototype).
"""
from __future__ import annotations

import torch

from tasks.algorithms.base import (
    Algorithm,
    ClientUpdate,
    HyperParams,
    LocalObjective,
    cross_entropy,
    searchable,
    state_of,
)
from tasks.algorithms.fedfm import class_stats, contrastive_guiding_loss, updated_anchors
from tasks.algorithms.registry import register


class FedProcParams(HyperParams):
    tau: float = searchable(0.5, 0.1, 1.0, gt=0, description="τ: temperature of the prototype contrast")


def ce_weight(round_idx: int, rounds: int) -> float:
    """w_t = (t + 1)/T: the cross-entropy's share grows to 1 in the last round."""
    return min(1.0, (round_idx + 1) / rounds)


def fedproc_loss(logits, y, h, prototypes, ce_share: float, tau: float, weight=None) -> torch.Tensor:
    """w·CE + (1 − w)·L_PC (docs/methods/fedproc.md §2)."""
    return ce_share * cross_entropy(logits, y, weight) + (1 - ce_share) * contrastive_guiding_loss(
        h, y, prototypes, tau, weight)


@register
class FedProc(Algorithm):
    name = "fedproc"
    shares = "the model and per-class prototypes"
    Params = FedProcParams
    keeps_client_state = False
    follows_averaging = True

    def init_global(self):
        model = self.new_model()
        return {"model": state_of(model), "prototypes": torch.zeros(self.num_classes, model.feature_dim),
                "has_prototypes": torch.tensor(False)}

    def payload(self, state, round_idx):
        return {k: state[k] for k in ("model", "prototypes", "has_prototypes")}

    def local_objective(self, payload, data, client_state, ctx):
        share = ce_weight(ctx.round, ctx.train.rounds) if bool(payload["has_prototypes"]) else 1.0
        return LocalObjective(start=payload["model"],
                              inputs={"prototypes": payload["prototypes"].to(ctx.device), "ce_share": share})

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        if inputs["ce_share"] == 1.0:
            return cross_entropy(logits, y, weight)
        return fedproc_loss(logits, y, h, inputs["prototypes"], inputs["ce_share"], self.params.tau, weight)

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        stats = class_stats(self.working_model(trained, device=ctx.device), data, ctx, self.setup.stats_privacy)
        return ClientUpdate(data.client_id, data.num_samples, tensors=trained, stats=stats,
                            metrics={"train_loss": train_loss}), client_state

    def aggregate(self, state, updates, round_idx):
        if not updates:
            return state
        averaged = super().aggregate(state, updates, round_idx)
        prototypes = updated_anchors([u.stats for u in updates], state["prototypes"])
        return {**averaged, "prototypes": prototypes, "has_prototypes": torch.tensor(True)}
