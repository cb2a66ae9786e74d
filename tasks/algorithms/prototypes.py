"""Class-prototype helpers shared by FedNH, FedSA and FedProto (no algorithm is registered here).

- spread prototypes on the unit sphere: docs/methods/fednh.md §2.2 (Eq. 1's regular simplex when C ≤ d + 1, Eq. 1 solved
  numerically beyond that, or the official code's random orthonormal rows);
- FedNH's server prototype update (docs/methods/fednh.md §4, the code's class-wise rule);
- the per-class unweighted mean of client prototypes (FedProto's `proto_aggregation`, docs/methods/fedsa.md §4.1 d);
- Euclidean distances with a clamped square root (docs/methods/fedsa.md §10.6), the mean nearest-neighbour distance (the
  FedSA code's margin, §3.3), and nearest-prototype prediction (§4.3).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tasks.privacy.mechanisms import clip_rows


# ------------------------------------------------------------------------------- initial prototypes
def simplex_prototypes(num_classes: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    """The regular simplex (Eq. 1's optimum for C ≤ d + 1): unit rows with pairwise cosine −1/(C−1),
    randomly rotated into R^d. Rows of an orthonormal basis of 1^⊥ ⊂ R^C have Gram I − 11ᵀ/C."""
    c = num_classes
    centred = torch.eye(c, dtype=torch.float64) - 1.0 / c
    basis, _ = torch.linalg.qr(centred[:, : c - 1])  # C × (C−1), orthonormal columns spanning 1^⊥
    rotation, _ = torch.linalg.qr(torch.randn(dim, c - 1, generator=generator, dtype=torch.float64))
    return (basis @ rotation.T * (c / (c - 1)) ** 0.5).float()


def optimised_prototypes(num_classes: int, dim: int, generator: torch.Generator, steps: int = 1000,
                         temperature: float = 0.02, lr: float = 0.05) -> torch.Tensor:
    """Eq. (1) beyond C = d + 1 (no closed form): projected gradient on the sphere minimising a smooth
    maximum (log-sum-exp) of the pairwise cosines, rows renormalised after each step (docs/methods/fednh.md §2.2 (b))."""
    w = F.normalize(torch.randn(num_classes, dim, generator=generator, dtype=torch.float64), dim=1)
    off_diagonal = ~torch.eye(num_classes, dtype=torch.bool)
    for _ in range(steps):
        w.requires_grad_(True)
        loss = torch.logsumexp((w @ w.T)[off_diagonal] / temperature, dim=0) * temperature
        (grad,) = torch.autograd.grad(loss, w)
        w = F.normalize(w.detach() - lr * grad, dim=1)
    return w.float()


def orthogonal_prototypes(num_classes: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    """The official code's init: random orthonormal rows (cosine 0). With C > d the rows of an orthonormal
    basis are not unit-norm, so they are renormalised (docs/methods/fednh.md §11.3)."""
    tall = torch.randn(max(num_classes, dim), min(num_classes, dim), generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(tall)
    q = q * torch.sign(torch.diagonal(r))
    rows = q if num_classes > dim else q.T
    return F.normalize(rows, dim=1).float()


def initial_prototypes(method: str, num_classes: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    """C unit-norm prototypes spread on the sphere: `simplex` (Eq. 1) or `orthogonal` (the code)."""
    if method == "orthogonal":
        return orthogonal_prototypes(num_classes, dim, generator)
    if num_classes <= dim + 1:
        return simplex_prototypes(num_classes, dim, generator)
    return optimised_prototypes(num_classes, dim, generator)


# ------------------------------------------------------------------------------------ server updates
def smoothed_prototype_update(prototypes: torch.Tensor, weighted_sums: torch.Tensor, counts: torch.Tensor,
                              rho: float) -> torch.Tensor:
    """FedNH's semantic infusion (Eq. 4 with the code's class-wise weights, docs/methods/fednh.md §4):
    a_c = normalise(Σ_k n_kc μ̂_kc / Σ_k n_kc); W_c ← normalise(ρ W_c + (1 − ρ) a_c).
    `weighted_sums` = Σ_k n_kc μ̂_kc and `counts` = Σ_k n_kc over the round's clients; a class that no client
    holds keeps its prototype (it is not shrunk toward 0)."""
    present = counts > 0
    semantic = F.normalize(weighted_sums.double(), dim=1)  # dividing by Σ_k n_kc would not change the direction
    moved = F.normalize(rho * prototypes.double() + (1.0 - rho) * semantic, dim=1)
    return torch.where(present.unsqueeze(1), moved, prototypes.double()).to(prototypes.dtype)


def mean_of_present(rows: list[torch.Tensor], masks: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per class, the unweighted mean of the rows whose mask is set (FedProto's aggregation): (C×D means with
    zero rows for classes nobody has, the C-mask of classes somebody has)."""
    stacked = torch.stack([r.double() for r in rows])  # K × C × D
    held = torch.stack(masks).double()  # K × C
    holders = held.sum(dim=0)
    means = (stacked * held.unsqueeze(2)).sum(dim=0) / holders.clamp_min(1.0).unsqueeze(1)
    return means.to(rows[0].dtype), holders > 0


# ------------------------------------------------------------------------------------------ geometry
def euclidean_distances(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """‖a_i − b_j‖ from the expanded form, clamped before the square root so its gradient stays finite
    where a row coincides with an anchor (docs/methods/fedsa.md §10.6)."""
    squared = (a * a).sum(1, keepdim=True) - 2 * a @ b.T + (b * b).sum(1).unsqueeze(0)
    return squared.clamp_min(eps).sqrt()


def mean_nearest_neighbour_distance(points: torch.Tensor) -> float:
    """Mean over rows of the distance to the nearest other row (the FedSA code's margin); 0 for < 2 rows."""
    if len(points) < 2:
        return 0.0
    dist = euclidean_distances(points.double(), points.double())
    dist.fill_diagonal_(float("inf"))
    return float(dist.min(dim=1).values.mean())


def nearest_prototype(features: torch.Tensor, prototypes: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The class of the nearest prototype (squared Euclidean, i.e. the code's MSE) among the classes in `mask`;
    −1 (never correct) when the mask is empty, as before the first aggregation (docs/methods/fedsa.md §4.3)."""
    if mask is not None and not bool(mask.any()):
        return torch.full((len(features),), -1, dtype=torch.long, device=features.device)
    dist = torch.cdist(features.double(), prototypes.double().to(features.device))
    if mask is not None:
        dist[:, ~mask.to(features.device)] = float("inf")
    return dist.argmin(dim=1)


class ClassMeans:
    """Running per-class sums and counts of feature rows: the prototypes of the features seen in training."""

    def __init__(self, num_classes: int, dim: int, clip: float | None = None):
        self.clip = clip  # each row clipped to this ℓ2 norm before it is summed (privacy.stats)
        self.sums = torch.zeros(num_classes, dim, dtype=torch.float64)
        self.counts = torch.zeros(num_classes, dtype=torch.float64)

    def add(self, h: torch.Tensor, y: torch.Tensor) -> None:
        h = h.detach().double().cpu()
        self.sums.index_add_(0, y.cpu(), h if self.clip is None else clip_rows(h, self.clip))
        self.counts.index_add_(0, y.cpu(), torch.ones(len(y), dtype=torch.float64))

    def means(self) -> torch.Tensor:
        return self.sums / self.counts.clamp_min(1.0).unsqueeze(1)
