"""FedFA (Zhou, Zhang, Tsang): feature anchors that align features and calibrate classifiers (specs/fedfa.md).

Following the authors' code wherever it differs from the paper ([CODE] in the spec):

- local loss (§2.2–2.3): CE + μ·L_fa with the code's class-balanced anchor loss
  μ·(1/C)·Σ_{c in batch} mean_{j∈B_c} ‖h_j − a_c‖² (no ½), raw penultimate features, anchors constant in the round;
- classifier calibration (§2.4, §9 points 4–5): after every main SGD step, one step of CE(φ(A), 0..C−1) over all C
  anchors on the last layer only (weight and bias), with its own Adam (lr 1e-3, the code's; the paper's
  pseudocode writes a plain step with η), created fresh each round;
- local anchor estimate (§2.5, eqs. 16–17 as the code runs them): per epoch, M_c = Σ_batches mean(h | y = c),
  then â_c ← λ·â_c + (1−λ)·M_c/B (B = batches in the epoch), seeded with the received global anchor, only for
  classes in the client's data; other rows go back unchanged;
- server (§3.1): models and anchors both averaged with weights n_i/n_S over the sampled clients;
- anchors initialised on C distinct random one-hot axes of R^d (§4), seeded from the run seed.

Ablation switches (§11, Table 3): `calibrate`, `update_anchors` (anchors stay at their initial values and clients
upload none) and `anchor_init` ("random": Gaussian unit rows). With `local_steps` the whole round counts as one
epoch for the moving average.
"""
from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from tasks.algorithms.anchors import (
    anchor_round_metrics,
    feature_anchor_distance,
    model_diagnostics,
    onehot_anchors,
    random_unit_anchors,
)
from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    ClientUpdate,
    HyperParams,
    RoundContext,
    TrainSettings,
    searchable,
    seeded_generator,
    state_of,
    train_supervised,
    weighted_average,
)
from tasks.algorithms.registry import register
from tasks.models import FLModel

ANCHOR_INIT_STREAM = 0xFA


class FedFAParams(HyperParams):
    # the code tuned baselines' coefficients in {1, 0.1, 0.01} (§8); Fig. 13's μ values are lost (§5)
    mu: float = searchable(0.1, 0.01, 1.0, log=True, ge=0, description="weight μ of the anchor loss")
    lam: float = searchable(0.5, 0.0, 1.0, ge=0, le=1, description="anchor momentum λ (Table 6: 0..1)")
    calibrate: bool = Field(True, description="classifier calibration on the anchors after every step")
    update_anchors: bool = Field(True, description="clients estimate and upload anchors; False: anchors stay put")
    anchor_init: Literal["onehot", "random"] = Field("onehot", description="one-hot axes or Gaussian unit rows")
    calibration_lr: float = Field(1e-3, gt=0, description="lr of the calibration's Adam (code default)")


# ----------------------------------------------------------------------------------------- losses
def anchor_loss(h: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """(1/C)·Σ_{c in batch} (1/|B_c|)·Σ_{j∈B_c} ‖h_j − a_c‖²: each distance over its class's count in the batch."""
    counts = torch.bincount(y, minlength=len(anchors)).to(h.dtype)
    squared = ((h - anchors[y]) ** 2).sum(dim=1)
    return (squared / counts[y]).sum() / len(anchors)


def classifier_calibration(model: FLModel, anchors: torch.Tensor, lr: float):
    """after_step hook: one Adam step on CE(φ(A), [0..C−1]) over the classifier's weight and bias only."""
    optimizer = torch.optim.Adam(model.classifier.parameters(), lr=lr)
    labels = torch.arange(len(anchors), device=anchors.device)

    def calibrate(m: FLModel, x, y) -> None:
        loss = F.cross_entropy(m.classifier(anchors), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return calibrate


# ------------------------------------------------------------------------------ anchor estimation
def batches_per_epoch(num_samples: int, train: TrainSettings) -> int:
    """Mini-batches in one local epoch as `local_batches` yields them (with local_steps: the whole round)."""
    if train.local_steps is not None:
        return train.local_steps
    if train.drop_last and num_samples >= train.batch_size:
        return num_samples // train.batch_size
    return math.ceil(num_samples / train.batch_size)


class AnchorMovingAverage:
    """A client's anchor estimate: M_c += mean(h | y=c) per batch; per epoch â_c ← λ·â_c + (1−λ)·M_c/B for the
    classes the client holds (fedfa.md §2.5 [CODE]); starts from the received global anchors."""

    def __init__(self, global_anchors: torch.Tensor, held: torch.Tensor, lam: float, batches_per_epoch: int):
        self.anchors = global_anchors.detach().clone()
        self.held = held.to(self.anchors.device)
        self.lam = lam
        self.batches_per_epoch = batches_per_epoch
        self._sum = torch.zeros_like(self.anchors)
        self._batches = 0

    def add(self, h: torch.Tensor, y: torch.Tensor) -> None:
        h = h.detach()
        sums = torch.zeros_like(self._sum).index_add_(0, y, h)
        counts = torch.bincount(y, minlength=len(self._sum)).clamp(min=1).to(h.dtype)
        self._sum += sums / counts[:, None]
        self._batches += 1
        if self._batches == self.batches_per_epoch:
            self.end_epoch()

    def end_epoch(self) -> None:
        if self._batches == 0:
            return
        mean = self._sum / self._batches
        self.anchors[self.held] = self.lam * self.anchors[self.held] + (1 - self.lam) * mean[self.held]
        self._sum.zero_()
        self._batches = 0


# ------------------------------------------------------------------------------------- algorithm
@register
class FedFA(Algorithm):
    name = "fedfa"
    keeps_client_state = False
    Params = FedFAParams
    not_vectorized = ("its anchor estimate (a moving average of the batches' class means) and its classifier "
                      "calibration (an Adam step after every step) are not yet written functionally")

    def init_global(self):
        model = self.new_model()
        init = onehot_anchors if self.params.anchor_init == "onehot" else random_unit_anchors
        anchors = init(self.num_classes, model.feature_dim, seeded_generator(self.setup.seed, ANCHOR_INIT_STREAM))
        return {"model": state_of(model), "anchors": anchors, "diagnostics": {}}

    def payload(self, state, round_idx):
        return {"model": state["model"], "anchors": state["anchors"]}

    def aggregate(self, state, updates, round_idx):
        if not updates:
            return {**state, "diagnostics": {}}
        weights = [u.num_samples for u in updates]
        new = {**state, "model": weighted_average([u.tensors for u in updates], weights),
               "diagnostics": model_diagnostics(updates, state["model"])}
        if self.params.update_anchors:
            new["anchors"] = weighted_average([u.stats for u in updates], weights)["anchors"]
        return new

    def round_metrics(self, state, updates, round_idx):
        return anchor_round_metrics(state, updates)

    def client_update(self, payload, data: ClientData, client_state, ctx: RoundContext):
        p = self.params
        model = self.working_model(payload["model"], device=ctx.device)
        anchors = payload["anchors"].to(ctx.device)
        estimate = AnchorMovingAverage(anchors, data.class_counts() > 0, p.lam,
                                       batches_per_epoch(data.num_samples, ctx.train))

        def anchor_term(m, x, y, h, logits):
            estimate.add(h, y)
            return p.mu * anchor_loss(h, y, anchors)

        calibrate = classifier_calibration(model, anchors, p.calibration_lr) if p.calibrate else None
        loss = train_supervised(model, data, ctx, extra_loss=anchor_term, after_step=calibrate)
        estimate.end_epoch()  # closes a partial last epoch (local_steps); a no-op otherwise
        distance, norm = feature_anchor_distance(model, data.x, data.y, anchors)
        stats = {"anchors": estimate.anchors.cpu()} if p.update_anchors else {}
        metrics = {"train_loss": loss, "feature_anchor_distance": distance, "feature_norm": norm}
        return ClientUpdate(data.client_id, data.num_samples, tensors=state_of(model), stats=stats,
                            metrics=metrics), client_state
