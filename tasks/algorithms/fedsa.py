"""FedSA (Zhou et al., AAAI 2025): prototype-based FL with private heterogeneous models aligned to fixed semantic
anchors (docs/methods/fedsa.md; defaults follow the official code `lokinko/FedSA` where §5 and §10 mark [code]).

Everything FedProto does (fedproto.py: private models from a family, uploads of per-class prototypes and counts
only, unweighted per-class aggregation, the three evaluation rules), plus:
- §2 semantic anchors, built once on the server from setup.seed: C×D standard-normal centres through the code's
  Linear–BN–ReLU–Linear–BN–ReLU embedding, in train mode (BatchNorm over the C anchor rows), never trained and
  detached: non-negative like the post-ReLU features. `embed_anchors: false` is the "no ER" ablation (raw centres).
  After each aggregation Ā^c ← αĀ^c + (1−α)P̄^c for the classes present (Eq. 10, α = 0.9999).
- §3 the local loss (Eq. 9) L_S + λ1·L_R + λ2·L_MCL + λ3·L_CC, with the code's per-sample forms (default):
  L_R = MSE(f, Ā^y) (squared, averaged over batch and D), L_MCL = CE(−(‖f − Ā‖ + d*·onehot(y)), y) over all C
  anchors with d* = max(global, local) margin, each a mean nearest-neighbour distance (anchors; the client's
  prototypes from its previous participation, 0 before it has any), and L_CC = CE(head(Ā), 0..C−1) on every
  batch, which moves the head only. `per_sample: false` applies L_R (Eq. 5: summed Euclidean distance) and
  L_MCL (Eq. 7) to the batch's class means instead (the paper's literal form). λ2 = 0 and λ3 = 0 are the
  Table 4 ablations.
- The payload holds only the anchors and the global prototypes (nearest-prototype evaluation needs them).
Engines: per-sample (the default), the loss is FedProto's `local_loss` with FedSA's terms, so it trains on the
vectorized engine; `per_sample: false` stays on the sequential one, since the batch's class means have as many
rows as the batch has classes (torch.unique), a shape that differs from client to client under vmap.
Evaluation: "acc" = nearest global prototype (the code's rule), with "head" and "anchor" (nearest anchor) also
reported (§10.14).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from tasks.algorithms.base import cross_entropy, derive_seed, searchable, torch_seeded
from tasks.algorithms.fedproto import FedProto, PrivateModelParams, mse_over_batch_and_dim
from tasks.algorithms.prototypes import (
    euclidean_distances,
    mean_nearest_neighbour_distance,
    nearest_prototype,
)
from tasks.algorithms.registry import register

ANCHOR_STREAM = 0xA7C
HEAD_WEIGHT, HEAD_BIAS = "classifier.weight", "classifier.bias"  # every family member's head is an nn.Linear


class FedSAParams(PrivateModelParams):
    lambda1: float = searchable(10.0, 0.1, 20.0, log=True, ge=0,
                                description="λ1: anchor regularisation L_R (10 with the code's MSE; 0.1 in the paper)")
    lambda2: float = searchable(1.0, 0.1, 10.0, log=True, ge=0,
                                description="λ2: margin-enhanced contrastive loss L_MCL (Table 5); 0 = ablation")
    lambda3: float = searchable(1.0, 0.1, 10.0, log=True, ge=0,
                                description="λ3: anchor-based classifier calibration L_CC (Table 5); 0 = ablation")
    alpha: float = Field(0.9999, ge=0, le=1, description="anchor EMA decay of Eq. (10) (hard-coded in the code)")
    embed_anchors: bool = Field(True, description="embed the random anchors by the code's fixed random MLP (ER)")
    per_sample: bool = Field(True, description="L_R and L_MCL on every feature (the code), else on batch class means")


# ------------------------------------------------------------------------------------------ anchors
def semantic_anchors(num_classes: int, dim: int, seed: int, embed: bool = True) -> torch.Tensor:
    """Random centres, through the code's untrained Linear–BN–ReLU ×2 embedding unless `embed` is off."""
    with torch_seeded(seed):
        centres = torch.randn(num_classes, dim)
        if not embed:
            return centres
        projector = nn.Sequential(nn.Linear(dim, dim), nn.BatchNorm1d(dim), nn.ReLU(),
                                  nn.Linear(dim, dim), nn.BatchNorm1d(dim), nn.ReLU())
        with torch.no_grad():
            return projector.train()(centres)  # train mode: BatchNorm standardises each coordinate over the C rows


# ------------------------------------------------------------------------------------------- losses
def anchor_regularisation(h: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor, per_sample: bool = True,
                          weight: torch.Tensor | None = None) -> torch.Tensor:
    """L_R: MSE(h, Ā^y) over batch and D (the code), or Σ_c ‖P^c − Ā^c‖ on class means (Eq. 5)."""
    if per_sample:
        return mse_over_batch_and_dim(h, anchors[y], weight)
    return (h - anchors[y]).norm(dim=1).sum()


def margin_contrastive_loss(h: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor, margin: float | torch.Tensor,
                            weight: torch.Tensor | None = None) -> torch.Tensor:
    """L_MCL (Eq. 7): softmax over −‖h − Ā^c‖ for all C anchors, the margin added to the true class's distance."""
    dist = euclidean_distances(h, anchors)
    return cross_entropy(-(dist + margin * F.one_hot(y, len(anchors))), y, weight)


def classifier_calibration_loss(head: nn.Module | dict, anchors: torch.Tensor) -> torch.Tensor:
    """L_CC (Eq. 8): the C anchors as one labelled sample per class through the head (a Linear module, or the
    model's parameters by name: the engines' functional form)."""
    logits = head(anchors) if isinstance(head, nn.Module) else F.linear(anchors, head[HEAD_WEIGHT], head.get(HEAD_BIAS))
    return F.cross_entropy(logits, torch.arange(len(anchors), device=anchors.device))


def batch_class_means(h: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's per-class mean features P^c (differentiable) and their classes."""
    classes, index = torch.unique(y, return_inverse=True)
    sums = torch.zeros(len(classes), h.shape[1], dtype=h.dtype, device=h.device).index_add(0, index, h)
    counts = torch.bincount(index, minlength=len(classes)).to(h.dtype)
    return sums / counts.unsqueeze(1), classes


def client_margin(anchors: torch.Tensor, local_margin: float) -> float:
    """d* = max(global, local): the anchors' mean nearest-neighbour distance, or the client's last prototypes'."""
    return max(mean_nearest_neighbour_distance(anchors), local_margin)


# --------------------------------------------------------------------------------------- algorithm
@register
class FedSA(FedProto):
    name = "fedsa"
    shares = "per-class prototypes"
    Params = FedSAParams

    # ------------------------------------------------------------------ server half
    def init_global(self):
        anchors = semantic_anchors(self.num_classes, self.feature_dim, derive_seed(self.setup.seed, ANCHOR_STREAM),
                                   self.params.embed_anchors)
        return {**super().init_global(), "anchors": anchors}

    def payload(self, state, round_idx):
        return {**super().payload(state, round_idx), "anchors": state["anchors"]}

    def aggregate(self, state, updates, round_idx):
        state = super().aggregate(state, updates, round_idx)
        a, mask = self.params.alpha, state["proto_mask"].unsqueeze(1)
        if updates:
            state = {**state, "anchors": torch.where(mask, a * state["anchors"] + (1 - a) * state["protos"],
                                                     state["anchors"])}
        return state

    def round_metrics(self, state, updates, round_idx):
        return {**super().round_metrics(state, updates, round_idx),
                "anchor_margin": mean_nearest_neighbour_distance(state["anchors"])}

    # ------------------------------------------------------------------ client half
    def init_client(self, data):
        return {**super().init_client(data), "local_margin": 0.0}

    def vectorized_refusal(self) -> str:
        if not self.params.per_sample:
            return ("per_sample: false applies L_R and L_MCL to the batch's class means, whose number (the batch's "
                    "classes) differs from client to client")
        return super().vectorized_refusal()

    def local_objective(self, payload, data, client_state, ctx):
        objective = super().local_objective(payload, data, client_state, ctx)
        margin = client_margin(payload["anchors"], client_state["local_margin"])
        objective.inputs.update(anchors=payload["anchors"].to(ctx.device),
                                margin=torch.tensor(margin, device=ctx.device))
        return objective

    def regularisation(self, params, h, y, inputs, weight=None):
        """λ1·L_R + λ2·L_MCL + λ3·L_CC (Eq. 9)."""
        p, anchors = self.params, inputs["anchors"]
        if not p.per_sample:
            h, y = batch_class_means(h, y)
        total = p.lambda1 * anchor_regularisation(h, y, anchors, p.per_sample, weight)
        if p.lambda2:
            total = total + p.lambda2 * margin_contrastive_loss(h, y, anchors, inputs["margin"], weight)
        if p.lambda3:
            total = total + p.lambda3 * classifier_calibration_loss(params, anchors)
        return total

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        update, state = super().client_result(trained, train_loss, payload, data, client_state, ctx)
        return update, {**state, "local_margin": mean_nearest_neighbour_distance(update.stats["protos"])}

    def prediction_rules(self, payload):
        anchors = payload["anchors"]
        return {**super().prediction_rules(payload), "anchor": lambda h, logits: nearest_prototype(h, anchors)}
