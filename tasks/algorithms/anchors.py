"""Shared pieces of the anchor methods (FedFA, FedFM): anchor initialisation, count-weighted anchor
aggregation, and the anchor diagnostics every anchor method logs.

- `onehot_anchors` / `random_unit_anchors`: FedFA's initial anchors (docs/methods/fedfa.md §4).
- `pooled_class_means`: eq. (9) of docs/methods/fedfm.md §3 (Σ_k n_{k,c}·a_{k,c} / Σ_k n_{k,c}, from per-class sums and
  counts), keeping the previous anchor of a class no client holds (docs/methods/fedfm.md §5, §11 point 7).
- Diagnostics (docs/methods/fedfa.md §6.4 and §9 point 16, DESIGN.md "Evaluation"):
  - `feature_anchor_distance`: a client's mean ‖h − a_y‖ and mean ‖h‖ on its training data; the server's
    sample-weighted mean over clients is the cross-client feature-to-anchor distance, logged raw and divided by
    the mean feature norm (anchor losses shrink features, so the raw distance partly measures scale);
  - `classifier_update_cosine`: per-row cosine of the classifier updates (local − global, weight | bias) between
    every pair of distinct clients, averaged over rows and pairs (the code of docs/methods/fedfa.md §6.4 also averages the
    self-pairs, which only adds a constant);
  - `min_anchor_distance`: the smallest pairwise ℓ2 distance between anchors.
"""
from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from tasks.algorithms.base import ClientUpdate, State, evaluating
from tasks.models import FLModel

CLASSIFIER_PREFIX = "classifier."


# ------------------------------------------------------------------------------------------- init
def onehot_anchors(num_classes: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    """C distinct random rows of the d×d identity (unit norm, pairwise orthogonal); Gaussian unit rows if C > d."""
    if num_classes > dim:
        return random_unit_anchors(num_classes, dim, generator)
    axes = torch.randperm(dim, generator=generator)[:num_classes]
    return torch.eye(dim)[axes]


def random_unit_anchors(num_classes: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    """Gaussian rows normalised to unit ℓ2 norm (FedFA's "w/o orthogonal initialisation")."""
    return F.normalize(torch.randn(num_classes, dim, generator=generator), dim=1)


# ------------------------------------------------------------------------------------ aggregation
def pooled_class_means(sums: list[torch.Tensor], counts: list[torch.Tensor],
                       previous: torch.Tensor) -> torch.Tensor:
    """Per-class pooled mean Σ_k s_{k,c} / Σ_k n_{k,c}; a class with no samples keeps its `previous` row."""
    total_sum = torch.stack([s.to(torch.float64) for s in sums]).sum(0)
    total_count = torch.stack([n.to(torch.float64) for n in counts]).sum(0)
    held = total_count > 0
    out = previous.clone()
    out[held] = (total_sum[held] / total_count[held, None]).to(previous.dtype)
    return out


# ------------------------------------------------------------------------------------ diagnostics
@torch.no_grad()
def feature_anchor_distance(model: FLModel, x: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor,
                            batch_size: int = 1024) -> tuple[float, float]:
    """(mean ‖h − a_y‖, mean ‖h‖) over the samples, features in eval mode."""
    device = next(model.parameters()).device
    anchors = anchors.to(device)
    dist, norm = 0.0, 0.0
    with evaluating(model):
        for start in range(0, len(y), batch_size):
            h = model.features(x[start:start + batch_size].to(device))
            dist += float((h - anchors[y[start:start + batch_size].to(device)]).norm(dim=1).sum())
            norm += float(h.norm(dim=1).sum())
    n = max(1, len(y))
    return dist / n, norm / n


def classifier_rows(model_state: State) -> torch.Tensor:
    """The classifier as C rows (weight | bias)."""
    weight = model_state[CLASSIFIER_PREFIX + "weight"]
    bias = model_state.get(CLASSIFIER_PREFIX + "bias")
    return weight if bias is None else torch.cat([weight, bias[:, None]], dim=1)


def classifier_update_cosine(client_models: list[State], global_model: State) -> float | None:
    """Mean over distinct client pairs and classifier rows of cos(Δφ_{i,c}, Δφ_{j,c}); None with < 2 clients."""
    if len(client_models) < 2:
        return None
    start = classifier_rows(global_model).to(torch.float64)
    deltas = [classifier_rows(m).to(torch.float64) - start for m in client_models]
    cosines = [F.cosine_similarity(a, b, dim=1).mean() for a, b in itertools.combinations(deltas, 2)]
    return float(torch.stack(cosines).mean())


def min_anchor_distance(anchors: torch.Tensor) -> float:
    dist = torch.cdist(anchors.to(torch.float64), anchors.to(torch.float64))
    dist.fill_diagonal_(float("inf"))
    return float(dist.min())


def anchor_round_metrics(state: State, updates: list[ClientUpdate]) -> dict[str, float]:
    """The round's anchor diagnostics: client-reported feature distances, the classifier-update cosine the
    aggregation stored in state["diagnostics"], and the anchors' minimum pairwise distance."""
    out: dict[str, float] = dict(state.get("diagnostics", {}))
    out["anchor_min_distance"] = min_anchor_distance(state["anchors"])
    reported = [u for u in updates if "feature_anchor_distance" in u.metrics]
    n = sum(u.num_samples for u in reported)
    if n:
        dist = sum(u.metrics["feature_anchor_distance"] * u.num_samples for u in reported) / n
        norm = sum(u.metrics["feature_norm"] * u.num_samples for u in reported) / n
        out.update(feature_anchor_distance=dist, feature_norm=norm,
                   feature_anchor_distance_rel=dist / norm if norm > 0 else float("nan"))
    return out


def model_diagnostics(updates: list[ClientUpdate], global_model: State) -> dict[str, float]:
    """What aggregation stores for round_metrics: the classifier-update cosine of the clients that sent models."""
    cosine = classifier_update_cosine([u.tensors for u in updates if u.tensors], global_model)
    return {} if cosine is None else {"classifier_update_cosine": cosine}
