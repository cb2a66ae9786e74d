"""FedFA (Zhou, Zhang, Tsang): feature anchors that align features and calibrate classifiers (docs/methods/fedfa.md).

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

Engines: the loss is a `local_loss`; the anchor estimate (fed each batch's detached features) and the calibration
(after each step) are side computations, run by the sequential engine as train_objective's recorder and
after_step (`client_update`) and by the vectorized one as step hooks on all of a round's clients at once
(`StackedAnchorEstimate`, `StackedCalibration`: the calibration's Adam on the stacked heads).
"""
from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch.func import grad, vmap

from tasks.algorithms import optimizers
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
    LocalObjective,
    RoundContext,
    TrainSettings,
    class_feature_stats,
    cross_entropy,
    searchable,
    seeded_generator,
    state_of,
    train_objective,
    weighted_average,
)
from tasks.algorithms.engines import StackedOptimizer
from tasks.algorithms.registry import register
from tasks.models import FLModel
from tasks.privacy.class_stats import released

ANCHOR_INIT_STREAM = 0xFA
HEAD_WEIGHT, HEAD_BIAS = "classifier.weight", "classifier.bias"  # the calibrated last layer, an nn.Linear


class FedFAParams(HyperParams):
    # the code tuned baselines' coefficients in {1, 0.1, 0.01} (§8); Fig. 13's μ values are lost (§5)
    mu: float = searchable(0.1, 0.01, 1.0, log=True, ge=0, description="weight μ of the anchor loss")
    lam: float = searchable(0.5, 0.0, 1.0, ge=0, le=1, description="anchor momentum λ (Table 6: 0..1)")
    calibrate: bool = Field(True, description="classifier calibration on the anchors after every step")
    update_anchors: bool = Field(True, description="clients estimate and upload anchors; False: anchors stay put")
    anchor_init: Literal["onehot", "random"] = Field("onehot", description="one-hot axes or Gaussian unit rows")
    calibration_lr: float = Field(1e-3, gt=0, description="lr of the calibration's Adam (code default)")


# ----------------------------------------------------------------------------------------- losses
def anchor_loss(h: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor,
                weight: torch.Tensor | None = None) -> torch.Tensor:
    """(1/C)·Σ_{c in batch} (1/|B_c|)·Σ_{j∈B_c} ‖h_j − a_c‖²: each distance over its class's count in the batch;
    with 0/1 weights, over the real samples only (the counts by one-hot sums: bincount does not run under vmap)."""
    squared = ((h - anchors[y]) ** 2).sum(dim=1)
    if weight is None:
        counts = torch.bincount(y, minlength=len(anchors)).to(h.dtype)
        return (squared / counts[y]).sum() / len(anchors)
    counts = (F.one_hot(y, len(anchors)).to(h.dtype) * weight.unsqueeze(1)).sum(dim=0).clamp(min=1)
    return (squared * weight / counts[y]).sum() / len(anchors)


def classifier_calibration(model: FLModel, anchors: torch.Tensor, lr: float):
    """after_step hook: one Adam step on CE(φ(A), [0..C−1]) over the classifier's weight and bias only."""
    optimizer = optimizers.Adam(model.classifier.parameters(), lr=lr)
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
    classes the client holds (docs/methods/fedfa.md §2.5 [CODE]); starts from the received global anchors."""

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


class StackedAnchorEstimate:
    """AnchorMovingAverage for [K] clients at once (the vectorized engine): per active client, the step's class
    means of its real samples (weight 1) are added, and its epoch closes after its own number of batches."""

    def __init__(self, global_anchors: torch.Tensor, held: torch.Tensor, lam: float, batches: torch.Tensor):
        k = len(held)
        self.anchors = global_anchors.detach().unsqueeze(0).repeat(k, 1, 1)
        self.held = held.to(self.anchors.device).unsqueeze(2)  # [K, C, 1]
        self.lam = lam
        self.batches_per_epoch = batches.to(self.anchors.device)
        self._sum = torch.zeros_like(self.anchors)
        self._batches = torch.zeros(k, dtype=torch.long, device=self.anchors.device)

    def after_step(self, h: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, active: torch.Tensor) -> None:
        member = F.one_hot(y, self.anchors.shape[1]).to(h.dtype) * weight.unsqueeze(2)  # [K, B, C]
        sums = torch.einsum("kbc,kbd->kcd", member, h.detach())
        counts = member.sum(dim=1).clamp(min=1)
        stepped = active > 0
        self._sum += (sums / counts.unsqueeze(2)) * stepped.reshape(-1, 1, 1)
        self._batches += stepped.long()
        self._close(stepped & (self._batches == self.batches_per_epoch))

    def _close(self, ending: torch.Tensor) -> None:
        """End the epoch of the `ending` clients: â_c ← λ·â_c + (1−λ)·M_c/B on the classes each holds."""
        mean = self._sum / self._batches.clamp(min=1).reshape(-1, 1, 1).to(self._sum.dtype)
        update = self.held & ending.reshape(-1, 1, 1)
        self.anchors = torch.where(update, self.lam * self.anchors + (1 - self.lam) * mean, self.anchors)
        self._sum = torch.where(ending.reshape(-1, 1, 1), torch.zeros_like(self._sum), self._sum)
        self._batches = torch.where(ending, torch.zeros_like(self._batches), self._batches)

    def hand_out(self, contexts: list[RoundContext]) -> None:
        self._close(self._batches > 0)  # a partial last epoch (local_steps), as AnchorMovingAverage.end_epoch
        for k, ctx in enumerate(contexts):
            ctx.recorded = self.anchors[k]


class StackedCalibration:
    """classifier_calibration for [K] clients at once: after every step of an active client, one Adam step of
    CE(φ(A), 0..C−1) on its classifier's weight and bias (the stacked `params`, updated in place)."""

    def __init__(self, params: dict[str, torch.Tensor], anchors: torch.Tensor, lr: float):
        self.head = {n: p for n, p in params.items() if n in (HEAD_WEIGHT, HEAD_BIAS)}
        self.optimizer = StackedOptimizer(self.head, TrainSettings(optimizer="adam", lr=lr), lr)
        labels = torch.arange(len(anchors), device=anchors.device)

        def loss(head: dict[str, torch.Tensor]) -> torch.Tensor:
            return F.cross_entropy(F.linear(anchors, head[HEAD_WEIGHT], head.get(HEAD_BIAS)), labels)

        self.gradients = vmap(grad(loss))

    def after_step(self, h, y, weight, active: torch.Tensor) -> None:
        grads = self.gradients(self.head)
        with torch.no_grad():
            self.optimizer.step(grads, active)

    def hand_out(self, contexts) -> None:
        pass


# ------------------------------------------------------------------------------------- algorithm
@register
class FedFA(Algorithm):
    name = "fedfa"
    shares = "the model and per-class feature statistics (anchors)"
    keeps_client_state = False
    Params = FedFAParams

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

    def local_objective(self, payload, data: ClientData, client_state, ctx: RoundContext):
        return LocalObjective(start=payload["model"], inputs={"anchors": payload["anchors"].to(ctx.device)})

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        """CE + μ·L_fa against the round's anchors (§2.2–2.3)."""
        return cross_entropy(logits, y, weight) + self.params.mu * anchor_loss(h, y, inputs["anchors"], weight)

    def client_update(self, payload, data: ClientData, client_state, ctx: RoundContext):
        """The sequential engine, with the anchor estimate fed every batch's features and the calibration after
        every step."""
        p, objective = self.params, self.local_objective(payload, data, client_state, ctx)
        model = self.working_model(objective.start, device=ctx.device)
        anchors = objective.inputs["anchors"]
        estimate = AnchorMovingAverage(anchors, data.class_counts() > 0, p.lam,
                                       batches_per_epoch(data.num_samples, ctx.train))
        calibrate = classifier_calibration(model, anchors, p.calibration_lr) if p.calibrate else None
        loss = train_objective(model, data, ctx, self.local_loss, objective.inputs, after_step=calibrate,
                               recorder=estimate)
        estimate.end_epoch()  # closes a partial last epoch (local_steps); a no-op otherwise
        ctx.recorded = estimate.anchors
        return self.client_result(state_of(model), loss, payload, data, client_state, ctx)

    def step_hooks(self, rounds, params):
        """The vectorized engine's anchor estimate and calibration (the clients of a round share the anchors)."""
        p, anchors = self.params, rounds[0].objective.inputs["anchors"]
        held = torch.stack([r.data.class_counts() > 0 for r in rounds])
        batches = torch.tensor([batches_per_epoch(r.data.num_samples, r.ctx.train) for r in rounds])
        hooks = [StackedAnchorEstimate(anchors, held, p.lam, batches)]
        return hooks + ([StackedCalibration(params, anchors, p.calibration_lr)] if p.calibrate else [])

    def uploaded_anchors(self, model: FLModel, payload, data: ClientData, ctx: RoundContext) -> torch.Tensor:
        """The client's anchor estimate; under privacy.stats instead the noised per-class means of its clipped
        features under the trained model (eval mode), the received anchor where a noised count rounds to 0
        (docs/methods/fedfa.md, "Under privacy")."""
        dp = self.setup.stats_privacy
        if not dp.active:
            return ctx.recorded.cpu()
        sums, counts = class_feature_stats(model, data.x.to(ctx.device), data.y.to(ctx.device), self.num_classes,
                                           clip=dp.clip)
        sums, counts = released(sums, counts, dp, ctx, data.client_id)
        received = payload["anchors"].cpu()
        means = (sums / counts.clamp_min(1.0).unsqueeze(1)).to(received.dtype)
        return torch.where((counts > 0).unsqueeze(1), means, received)

    def client_result(self, trained, train_loss, payload, data: ClientData, client_state, ctx: RoundContext):
        model = self.working_model(trained, device=ctx.device)
        distance, norm = feature_anchor_distance(model, data.x, data.y, payload["anchors"].to(ctx.device))
        stats = {"anchors": self.uploaded_anchors(model, payload, data, ctx)} if self.params.update_anchors else {}
        metrics = {"train_loss": train_loss, "feature_anchor_distance": distance, "feature_norm": norm}
        return ClientUpdate(data.client_id, data.num_samples, tensors=trained, stats=stats,
                            metrics=metrics), client_state
