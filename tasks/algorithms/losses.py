"""The batch means a loss is made of, over a batch's real samples where the vectorized engine pads it."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def batch_mean(values: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Mean over the batch's first dimension; with 0/1 weights, over the real (weight 1) samples only."""
    if weight is None:
        return values.mean(dim=0)
    w = weight.reshape(-1, *([1] * (values.dim() - 1)))
    return (values * w).sum(dim=0) / weight.sum().clamp_min(1.0)


def cross_entropy(logits: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over the batch (over its real samples when `weight` masks padding)."""
    if weight is None:
        return F.cross_entropy(logits, y)
    # −log_softmax at the label, as F.cross_entropy computes it, without nll_loss: its vmap rule costs a dozen
    # extra operators a step, the vectorized engine's largest per-step cost on small batches
    nll = -logits.log_softmax(dim=-1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
    return batch_mean(nll, weight)

