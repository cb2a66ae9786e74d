"""FedFM and FedFM-Lite (Ye et al.): anchor-based feature matching (docs/methods/fedfm.md §2–§6, §11).

FedFM (§2–§3, §5):
- anchors are per-class means of the penultimate features of the GLOBAL model (eval mode, no gradient) over each
  client's training data (eq. 8), aggregated with per-class counts (eq. 9); a class no participant holds keeps
  its previous anchor (§5, §11 point 7; the code would give NaN). Anchors start at zero, as in the code.
- local loss CE + λ·L_FM, L_FM the contrastive-guiding loss [CODE]: CE over cos(h, a_n)/τ against all C
  anchors (τ is the paper's α, the code's cg_tau), or with `loss: l2` the code's ℓ2 matching,
  mean over B·d of (ĥ − â_y)² on normalised vectors. L_FM reaches the extractor only.
- `warmup_rounds` (T_s): rounds t < T_s are plain FedAvg; anchors are still computed, so they are ready at T_s.
- Two handshakes per round, as Algorithm 1: the round's clients first send their class statistics under the
  broadcast model w^(t) (the pre-round exchange), the server aggregates them into 𝒜^(t), and the clients then
  train against 𝒜^(t). The code computes the same anchors from w^(t) over the previous round's participants
  (equal under full participation; §3 "Order of operations"). With T_s = 0, round 0's anchors come from the
  random initial model, as in Algorithm 1 (the code's zero anchors would give the CG loss no gradient).

FedFM-Lite (§4): the client computes its statistics with its TRAINED local model after training (anchors used
in the next round, as the paper says), anchors go both ways every round, models only every `period` rounds (the
schedule of tasks/algorithms/fedavg_periodic.py); between syncs each client trains on from its own model.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from tasks.algorithms.anchors import (
    anchor_round_metrics,
    feature_anchor_distance,
    model_diagnostics,
    pooled_class_means,
)
from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    ClientUpdate,
    HyperParams,
    LocalObjective,
    RoundContext,
    State,
    batch_mean,
    class_feature_stats,
    cross_entropy,
    searchable,
    state_of,
)
from tasks.algorithms.fedavg_periodic import PeriodicModelSync, average_sent_models
from tasks.algorithms.registry import register
from tasks.models import FLModel
from tasks.privacy.class_stats import released
from tasks.privacy.settings import StatsDP


class FedFMParams(HyperParams):
    lam: float = searchable(50.0, 0.1, 1000.0, log=True, ge=0,
                            description="weight λ of the feature-matching loss (paper/code 50; Fig. 8c: 1..1000)")
    tau: float = searchable(0.1, 0.01, 10.0, log=True, gt=0,
                            description="CG temperature (the paper's α, the code's cg_tau; Table IX: 0.01..10)")
    warmup_rounds: int = searchable(20, 0, 40, integer=True, ge=0,
                                    description="T_s: plain FedAvg in rounds t < T_s (Fig. 8c: 1, 20, 40)")
    loss: Literal["cg", "l2"] = Field("cg", description="contrastive guiding, or the normalised ℓ2 matching")


class FedFMLiteParams(FedFMParams):
    period: int = searchable(5, 1, 10, integer=True, ge=1, description="a: models communicated every a rounds")


# ----------------------------------------------------------------------------------------- losses
def contrastive_guiding_loss(h: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor, tau: float,
                             weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean CE of softmax_n(cos(h, a_n)/τ) against the true class, all C anchors in the denominator."""
    logits = F.normalize(h, dim=1) @ F.normalize(anchors, dim=1).T / tau
    return cross_entropy(logits, y, weight)


def l2_matching_loss(h: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor,
                     weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over the B·d entries of (h/‖h‖ − a_y/‖a_y‖)², i.e. (2 − 2·cos)/d per sample."""
    if weight is None:
        return F.mse_loss(F.normalize(h, dim=1), F.normalize(anchors, dim=1)[y])
    return batch_mean(((F.normalize(h, dim=1) - F.normalize(anchors, dim=1)[y]) ** 2).mean(dim=1), weight)


def class_stats(model: FLModel, data: ClientData, ctx: RoundContext, dp: StatsDP) -> State:
    """Per-class feature sums and counts (eval mode, no grad): what eq. (9) needs, as float32 on the wire; under
    privacy.stats, of clipped features and noised (tasks/privacy/class_stats.py)."""
    sums, counts = class_feature_stats(model, data.x.to(ctx.device), data.y.to(ctx.device), data.num_classes,
                                       clip=dp.clip)
    sums, counts = released(sums, counts, dp, ctx, data.client_id)
    return {"sums": sums.float(), "counts": counts.float()}


def updated_anchors(stats: list[State], previous: torch.Tensor) -> torch.Tensor:
    """Eq. (9): per-class pooled means of the clients' feature sums; a class no client holds keeps its anchor."""
    if not stats:
        return previous
    return pooled_class_means([s["sums"] for s in stats], [s["counts"] for s in stats], previous)


# ------------------------------------------------------------------------------------- algorithm
@register
class FedFM(Algorithm):
    name = "fedfm"
    shares = "the model and per-class feature anchors"
    keeps_client_state = False
    Params = FedFMParams
    # FedFM: anchors from the broadcast model, before training (pre-round exchange); Lite: from the trained
    # local model, uploaded with the update and used in the next round

    def init_global(self):
        model = self.new_model()
        anchors = torch.zeros(self.num_classes, model.feature_dim)
        return {"model": state_of(model), "anchors": anchors, "diagnostics": {}}

    def payload(self, state, round_idx):
        return {"model": state["model"], "anchors": state["anchors"]}

    def client_pre_round(self, payload, data: ClientData, client_state, ctx: RoundContext):
        model = self.working_model(self.starting_model(payload, client_state), device=ctx.device)
        return class_stats(model, data, ctx, self.setup.stats_privacy)

    def server_pre_round(self, state, contributions, round_idx):
        return {**state, "anchors": updated_anchors(contributions, state["anchors"])}

    def aggregate(self, state, updates, round_idx):
        if not updates:
            return {**state, "diagnostics": {}}
        new = {**state, "diagnostics": model_diagnostics(updates, state["model"])}
        if not self.capabilities().pre_round_exchange:
            new["anchors"] = updated_anchors([u.stats for u in updates], state["anchors"])
        return average_sent_models(new, updates)

    def round_metrics(self, state, updates, round_idx):
        return anchor_round_metrics(state, updates)

    # hooks FedFM-Lite replaces (PeriodicModelSync)
    def uploads_model(self, round_idx: int) -> bool:
        return True

    def starting_model(self, payload: State, client_state: State) -> State:
        return payload["model"]

    def next_client_state(self, trained: State, client_state: State) -> State:
        return client_state

    def local_objective(self, payload, data: ClientData, client_state, ctx: RoundContext):
        """The round's fixed anchors; none during the warm-up rounds t < T_s (plain FedAvg)."""
        matching = ctx.round >= self.params.warmup_rounds
        inputs = {"anchors": payload["anchors"].to(ctx.device)} if matching else {}
        return LocalObjective(start=self.starting_model(payload, client_state), inputs=inputs)

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        """CE + λ·L_FM against the round's anchors (docs/methods/fedfm.md §2.2, the code's CG loss or ℓ2 matching)."""
        loss = cross_entropy(logits, y, weight)
        if "anchors" not in inputs:
            return loss
        if self.params.loss == "cg":
            return loss + self.params.lam * contrastive_guiding_loss(h, y, inputs["anchors"], self.params.tau, weight)
        return loss + self.params.lam * l2_matching_loss(h, y, inputs["anchors"], weight)

    def client_result(self, trained, train_loss, payload, data: ClientData, client_state, ctx: RoundContext):
        model = self.working_model(trained, device=ctx.device)
        stats = {} if self.capabilities().pre_round_exchange else class_stats(model, data, ctx, self.setup.stats_privacy)
        distance, norm = feature_anchor_distance(model, data.x, data.y, payload["anchors"])
        tensors = trained if self.uploads_model(ctx.round) else {}
        metrics = {"train_loss": train_loss, "feature_anchor_distance": distance, "feature_norm": norm}
        update = ClientUpdate(data.client_id, data.num_samples, tensors=tensors, stats=stats, metrics=metrics)
        return update, self.next_client_state(trained, client_state)


@register
class FedFMLite(PeriodicModelSync, FedFM):
    name = "fedfm_lite"
    shares = "per-class feature anchors; the model every few rounds"
    Params = FedFMLiteParams
    # anchors from the trained local model, uploaded with the update: no exchange before the round
    client_pre_round = Algorithm.client_pre_round
    server_pre_round = Algorithm.server_pre_round
