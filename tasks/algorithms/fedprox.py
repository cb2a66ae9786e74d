"""FedProx (Li et al.): FedAvg plus the proximal term (μ/2)·‖w − w_global‖² in the local objective.

The specs use μ = 0.1 (docs/methods/fedfa.md §11) and μ = 0.01 (docs/methods/fedfm.md §12, docs/methods/feddebias.md §10.2); the default follows
the digits protocols of the latter two.
"""
from __future__ import annotations

import torch

from tasks.algorithms.base import Algorithm, HyperParams, LocalObjective, cross_entropy, on_device, searchable
from tasks.algorithms.registry import register


class FedProxParams(HyperParams):
    mu: float = searchable(0.01, 1e-4, 1.0, log=True, ge=0, description="proximal weight μ")


def proximal_term(params: dict[str, torch.Tensor], anchor: dict[str, torch.Tensor], mu: float) -> torch.Tensor:
    """(μ/2)·Σ‖w − w_g‖² over the trained parameters, by name: its gradient w.r.t. w is μ·(w − w_g)."""
    return 0.5 * mu * sum(((p - anchor[name]) ** 2).sum() for name, p in params.items())


@register
class FedProx(Algorithm):
    name = "fedprox"
    keeps_client_state = False
    Params = FedProxParams

    def local_objective(self, payload, data, client_state, ctx):
        return LocalObjective(start=payload["model"], inputs={"anchor": on_device(payload["model"], ctx.device)})

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        """CE + (μ/2)·‖w − w_global‖² (docs/methods/fedfa.md §11, docs/methods/fedfm.md §12)."""
        return cross_entropy(logits, y, weight) + proximal_term(params, inputs["anchor"], self.params.mu)
