"""The mechanisms, on plain tensors: ℓ2 clipping of an update and of feature rows, Gaussian noise from a given
generator, the adaptive clipping norm's step, and the release of per-class statistics (docs/privacy.md)."""
from __future__ import annotations

import math

import torch

from tasks.privacy.settings import AdaptiveClipping, StatsDP

State = dict[str, torch.Tensor]


def float_keys(tensors: State) -> list[str]:
    """The tensors that are clipped and noised: floating point ones (integer buffers are counters)."""
    return [k for k, v in tensors.items() if torch.is_floating_point(v)]


def update_norm(update: State, reference: State) -> float:
    """‖θ − θ_ref‖₂ over every floating tensor of the update, in float64."""
    total = sum(float(((update[k].double() - reference[k].double()) ** 2).sum()) for k in float_keys(update))
    return math.sqrt(total)


def clipped_update(update: State, reference: State, clip: float) -> tuple[State, float]:
    """θ_ref + Δ·min(1, C/‖Δ‖) with Δ = θ − θ_ref (every floating tensor scaled by the same factor), and ‖Δ‖.
    Non-floating tensors are sent as they are."""
    norm = update_norm(update, reference)
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    out = dict(update)
    if scale < 1.0:
        for k in float_keys(update):
            delta = (update[k].double() - reference[k].double()) * scale
            out[k] = (reference[k].double() + delta).to(update[k].dtype)
    return out, norm


def with_gaussian_noise(tensors: State, std: float, generator: torch.Generator) -> State:
    """Every floating tensor plus N(0, std²) per entry, drawn in float64 from `generator` in key order."""
    if std == 0:
        return dict(tensors)
    out = dict(tensors)
    for k in float_keys(tensors):
        noise = torch.randn(tensors[k].shape, generator=generator, dtype=torch.float64) * std
        out[k] = (tensors[k].double() + noise).to(tensors[k].dtype)
    return out


def next_clip(clip: float, within: list[float], adaptive: AdaptiveClipping, generator: torch.Generator) -> float:
    """One step of quantile-based adaptive clipping (Andrew et al. 2021, geometric update):
    b̃ = (Σ_k b_k + N(0, σ_b²)) / m, C ← C·exp(−η·(b̃ − γ)), b_k = 1 if client k's update was within C."""
    if not within:
        return clip
    noise = float(torch.randn((), generator=generator, dtype=torch.float64)) * adaptive.count_noise_multiplier
    fraction = (sum(within) + noise) / len(within)
    return clip * math.exp(-adaptive.learning_rate * (fraction - adaptive.target_quantile))


def clip_rows(h: torch.Tensor, clip: float) -> torch.Tensor:
    """Each row scaled to ℓ2 norm at most `clip` (rows already within it unchanged)."""
    norms = h.norm(dim=-1, keepdim=True)
    return h * (clip / norms.clamp_min(1e-12)).clamp(max=1.0)


def released_class_stats(sums: torch.Tensor, counts: torch.Tensor, dp: StatsDP,
                         generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class sums of clipped features and per-class counts as they leave the client: every class's row,
    held or not, gets N(0, (σ·C)²) per sum entry and N(0, σ²) on its count; the counts are then rounded and
    floored at 0 (post-processing), so a class reads as absent when its noised count rounds to 0."""
    sigma = dp.noise_multiplier
    noisy_sums = sums.double() + torch.randn(sums.shape, generator=generator, dtype=torch.float64) * sigma * dp.clip
    noisy_counts = counts.double() + torch.randn(counts.shape, generator=generator, dtype=torch.float64) * sigma
    return noisy_sums.to(sums.dtype), noisy_counts.round().clamp_min(0).to(counts.dtype)
