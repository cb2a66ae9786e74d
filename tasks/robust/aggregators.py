"""Robust aggregators of client updates Δ_k = θ_k − θ (rows of an [n, d] float64 matrix), and bucketing in front of
any of them (Karimireddy, He and Jaggi, ICLR 2022). Each returns the aggregated update, a vector of d.

Weighted as their references are: mean, geometric median (RFA, Pillutla et al. 2022) and norm bounding (Sun et al.
2019) weigh client k by w_k (its sample count, or 1 under uniform averaging); coordinate-wise median, trimmed
mean, Krum and centered clipping treat every update alike, as Yin et al. 2018, Blanchard et al. 2017 and
Karimireddy et al. 2021 do."""
from __future__ import annotations

import math

import torch

AGGREGATORS = ("mean", "median", "trimmed_mean", "krum", "geomed", "centered_clipping", "norm_bound")
WEIGHTED = frozenset({"mean", "geomed", "norm_bound"})


def mean(deltas: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_k w_k Δ_k / Σ_k w_k."""
    return (weights[:, None] * deltas).sum(0) / weights.sum()


def median(deltas: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median; with an even n, the mean of the two middle values (NumPy's median)."""
    n = deltas.shape[0]
    ordered = deltas.sort(dim=0).values
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def trimmed_count(n: int, beta: float) -> int:
    """The updates cut from each end of every coordinate: ⌊β·n⌋, at most (n − 1) // 2 so one stays."""
    return min(int(math.floor(beta * n + 1e-9)), (n - 1) // 2)


def trimmed_mean(deltas: torch.Tensor, beta: float) -> torch.Tensor:
    """Per coordinate, the mean of the values left once the b = ⌊β·n⌋ largest and b smallest are cut."""
    n = deltas.shape[0]
    b = trimmed_count(n, beta)
    return deltas.sort(dim=0).values[b:n - b].mean(0)


def krum_fit(n: int, f: int) -> int:
    """The f Krum can assume of n updates: its score needs n − f − 2 ≥ 1 neighbours, so f ≤ n − 3 (and f ≥ 0)."""
    return max(0, min(f, n - 3))


def krum_select(deltas: torch.Tensor, f: int, m: int) -> list[int]:
    """The m updates of lowest Krum score, score_i = Σ of the squared distances from Δ_i to its n − f − 2 nearest
    others (Blanchard et al. 2017), lowest first (ties: lower index)."""
    n = deltas.shape[0]
    if n == 1:
        return [0]
    f = krum_fit(n, f)
    distances = torch.cdist(deltas, deltas).pow(2)
    neighbours = max(1, n - f - 2)
    scores = []
    for i in range(n):
        others = torch.cat([distances[i, :i], distances[i, i + 1:]])
        scores.append(float(others.sort().values[:neighbours].sum()))
    return sorted(range(n), key=lambda i: (scores[i], i))[:max(1, min(m, n))]


def krum(deltas: torch.Tensor, f: int, m: int) -> torch.Tensor:
    """Krum (m = 1): the update of lowest score; Multi-Krum (m > 1): the mean of the m lowest."""
    return deltas[krum_select(deltas, f, m)].mean(0)


def geometric_median(deltas: torch.Tensor, weights: torch.Tensor, iterations: int = 4, nu: float = 1e-6,
                     tol: float = 1e-6) -> torch.Tensor:
    """RFA's smoothed Weiszfeld iterations (Pillutla et al. 2022, Algorithm 2): from the weighted mean,
    v ← Σ_k β_k Δ_k / Σ_k β_k with β_k = w_k / max(ν, ‖v − Δ_k‖), until the objective Σ_k w_k‖v − Δ_k‖ moves by
    less than tol × itself, or after `iterations` steps."""
    alphas = weights / weights.sum()
    v = mean(deltas, alphas)
    objective = float((alphas * (deltas - v).norm(dim=1)).sum())
    for _ in range(iterations):
        betas = alphas / (deltas - v).norm(dim=1).clamp_min(nu)
        v = mean(deltas, betas)
        previous, objective = objective, float((alphas * (deltas - v).norm(dim=1)).sum())
        if abs(previous - objective) <= tol * objective:
            break
    return v


def clipped(v: torch.Tensor, tau: float) -> torch.Tensor:
    """Rows of v scaled to ℓ2 norm at most tau."""
    norms = v.norm(dim=-1, keepdim=True)
    return v * torch.clamp(tau / norms.clamp_min(1e-12), max=1.0)


def centered_clipping(deltas: torch.Tensor, center: torch.Tensor, tau: float, iterations: int = 1) -> torch.Tensor:
    """Centered clipping (Karimireddy et al. 2021): v ← v + (1/n) Σ_k clip_τ(Δ_k − v), `iterations` times, from
    `center` (the last round's aggregate, as the reference code keeps its momentum)."""
    v = center
    for _ in range(iterations):
        v = v + clipped(deltas - v, tau).mean(0)
    return v


def norm_bound(deltas: torch.Tensor, weights: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Norm bounding (Sun et al. 2019): each Δ_k scaled to ℓ2 norm at most max_norm, then the weighted mean."""
    return mean(clipped(deltas, max_norm), weights)


def buckets(deltas: torch.Tensor, weights: torch.Tensor, s: int,
            generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Bucketing (Karimireddy et al. 2022, Algorithm 1): the updates in a random order, cut into ⌈n/s⌉ buckets of
    s consecutive ones (the last may hold fewer), each bucket's (weighted) mean; returns the bucket means and
    each bucket's total weight."""
    n = deltas.shape[0]
    order = torch.randperm(n, generator=generator)
    means, totals = [], []
    for start in range(0, n, s):
        idx = order[start:start + s]
        means.append(mean(deltas[idx], weights[idx]))
        totals.append(weights[idx].sum())
    return torch.stack(means), torch.stack(totals)


def aggregate(name: str, deltas: torch.Tensor, weights: torch.Tensor, *, beta: float = 0.1, f: int = 1, m: int = 1,
              iterations: int = 4, nu: float = 1e-6, tau: float = 1.0, center: torch.Tensor | None = None,
              max_norm: float = 1.0) -> torch.Tensor:
    """The aggregator `name` on the rows of `deltas`; `weights` are read only by the weighted ones."""
    if name not in WEIGHTED:
        weights = torch.ones_like(weights)
    if name == "mean":
        return mean(deltas, weights)
    if name == "median":
        return median(deltas)
    if name == "trimmed_mean":
        return trimmed_mean(deltas, beta)
    if name == "krum":
        return krum(deltas, f, m)
    if name == "geomed":
        return geometric_median(deltas, weights, iterations, nu)
    if name == "centered_clipping":
        return centered_clipping(deltas, torch.zeros_like(deltas[0]) if center is None else center, tau, iterations)
    if name == "norm_bound":
        return norm_bound(deltas, weights, max_norm)
    raise ValueError(f"unknown aggregator {name!r}; allowed: {', '.join(AGGREGATORS)}")
