"""FedProx (Li et al.): FedAvg plus the proximal term (μ/2)·‖w − w_global‖² in the local objective.

The specs use μ = 0.1 (fedfa.md §11) and μ = 0.01 (fedfm.md §12, feddebias.md §10.2); the default follows
the digits protocols of the latter two.
"""
from __future__ import annotations

import torch

from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    ClientUpdate,
    HyperParams,
    RoundContext,
    searchable,
    state_of,
    train_supervised,
)
from tasks.algorithms.registry import register


class FedProxParams(HyperParams):
    mu: float = searchable(0.01, 1e-4, 1.0, log=True, ge=0, description="proximal weight μ")


def proximal_term(model: torch.nn.Module, anchor: list[torch.Tensor], mu: float) -> torch.Tensor:
    """(μ/2)·Σ‖w − w_g‖²: its gradient w.r.t. w is μ·(w − w_g)."""
    return 0.5 * mu * sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor))


@register
class FedProx(Algorithm):
    name = "fedprox"
    keeps_client_state = False
    Params = FedProxParams

    def client_update(self, payload, data: ClientData, client_state, ctx: RoundContext):
        model = self.working_model(payload["model"], device=ctx.device)
        anchor = [p.detach().clone() for p in model.parameters()]
        mu = self.params.mu
        loss = train_supervised(model, data, ctx, extra_loss=lambda m, *_: proximal_term(m, anchor, mu))
        return ClientUpdate(data.client_id, data.num_samples, tensors=state_of(model),
                            metrics={"train_loss": loss}), client_state
