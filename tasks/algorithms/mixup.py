"""FedAvg + Mixup (Zhang et al., "mixup: Beyond Empirical Risk Minimization", ICLR 2018; as a domain-generalisation
baseline, Yan et al. 2020): every local batch is mixed within itself, x̃ = λ·x + (1 − λ)·x[π], and trained on the
mixed soft label, λ·CE(f(x̃), y) + (1 − λ)·CE(f(x̃), y[π]), with λ ∼ Beta(α, α) and π a permutation of the batch,
drawn fresh at every step. The server averages as FedAvg. A row of FedDebias's Table 10 (docs/methods/mixup.md).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from tasks.algorithms.base import Algorithm, HyperParams, derive_seed, searchable, state_of, train_batch_loss
from tasks.algorithms.registry import register

MIXING_STREAM = 0x3A1C5  # the λ and permutation draws: apart from the batches' generator


class MixupParams(HyperParams):
    alpha: float = searchable(0.2, 0.05, 1.0, log=True, gt=0,
                              description="α of λ ∼ Beta(α, α) (FedDebias's baseline: 0.2)")


def mixing_rng(seed: int, round_idx: int, client_id: int) -> np.random.Generator:
    """The client's round stream of λ and permutations, the same on any actor."""
    return np.random.default_rng(derive_seed(seed, round_idx, client_id, MIXING_STREAM))


def mixup_loss(logits: torch.Tensor, y: torch.Tensor, y_mixed: torch.Tensor, lam: float) -> torch.Tensor:
    """λ·CE(logits, y) + (1 − λ)·CE(logits, y_mixed): the CE against the mixed soft label."""
    return lam * F.cross_entropy(logits, y) + (1.0 - lam) * F.cross_entropy(logits, y_mixed)


@register
class Mixup(Algorithm):
    name = "mixup"
    Params = MixupParams
    keeps_client_state = False
    not_vectorized = ("each step mixes its batch with a λ and a permutation drawn for that step; the vectorised "
                      "engine trains a `local_loss` of the batch as drawn")

    def client_update(self, payload, data, client_state, ctx):
        model = self.working_model(payload["model"], device=ctx.device)
        rng = mixing_rng(ctx.seed, ctx.round, data.client_id)

        def mixed_batch_loss(x, y):
            lam = float(rng.beta(self.params.alpha, self.params.alpha))
            order = torch.from_numpy(rng.permutation(len(x))).to(x.device)
            return mixup_loss(model(lam * x + (1.0 - lam) * x[order]), y, y[order], lam)

        loss = train_batch_loss(model, data, ctx, mixed_batch_loss)
        return self.client_result(state_of(model), loss, payload, data, client_state, ctx)
