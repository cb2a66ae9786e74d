"""q-FFL by q-FedAvg (Li, Sanjabi, Beirami, Smith 2020, "Fair Resource Allocation in Federated Learning"): the server
minimises Σ_k F_k^{q+1}/(q+1), weighing the clients whose loss is high more the larger q (docs/methods/qffl.md).

Clients train as FedAvg's do. Client k also evaluates its loss F_k(w) on its own training data at the model w it was
sent, before training, and sends its trained model w̄_k with F_k and L (1/η, η the round's learning rate, unless
`lipschitz` sets it). The server (the paper's Algorithm 2, as the authors' `qffedavg` computes it):

    Δw_k = L·(w − w̄_k),   Δ_k = F_k^q·Δw_k,   h_k = q·F_k^{q−1}·‖Δw_k‖² + L·F_k^q,   w ← w − Σ_k Δ_k / Σ_k h_k

with F_k + 1e-10 in place of F_k (the authors' code) and ‖·‖² over every parameter. q = 0 is FedAvg with equal
weights. Buffers (BatchNorm statistics) take the plain mean.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field

from tasks.algorithms.base import Algorithm, ClientData, ClientUpdate, HyperParams, evaluating, searchable
from tasks.algorithms.model_state import stepped
from tasks.algorithms.registry import register
from tasks.algorithms.server_optimizers import parameter_names

LOSS_FLOOR = 1e-10  # the authors' code: F_k + 1e-10, so that F_k^{q−1} stays finite at a zero loss


class QFFLParams(HyperParams):
    q: float = searchable(1.0, 0.0, 15.0, ge=0, description="fairness q: 0 is FedAvg (equal weights); larger q weighs "
                                                               "the clients of high loss more")
    lipschitz: float | None = Field(None, gt=0, description="L, the Lipschitz estimate of the clients' gradients; "
                                    "null: 1/η, the round's learning rate (the paper's and the authors' choice)")


@torch.no_grad()
def training_loss(model: torch.nn.Module, data: ClientData, device, batch_size: int = 1024) -> float:
    """The mean cross-entropy of `model` (in eval mode) over the client's whole training split: F_k(w)."""
    total, n = 0.0, data.num_samples
    if n == 0:
        return 0.0
    with evaluating(model):
        for start in range(0, n, batch_size):
            x, y = data.x[start:start + batch_size].to(device), data.y[start:start + batch_size].to(device)
            total += float(F.cross_entropy(model(x), y, reduction="sum").to(torch.float64))
    return total / n


def qffl_step(start: dict[str, torch.Tensor], models: list[dict[str, torch.Tensor]], losses: list[float],
              lipschitz: list[float], q: float, parameters: set[str]) -> dict[str, torch.Tensor]:
    """w − Σ_k Δ_k / Σ_k h_k over `parameters` (q-FedAvg's server step), the plain mean of the clients' float
    buffers, the first client's integer buffers."""
    names = [k for k in start if k in parameters]
    deltas, hs = [], []
    for model, loss, lip in zip(models, losses, lipschitz):
        f = loss + LOSS_FLOOR
        dw = {k: lip * (start[k].to(torch.float64) - model[k].to(torch.float64)) for k in names}
        norm2 = sum(float((d * d).sum()) for d in dw.values())
        deltas.append({k: f**q * d for k, d in dw.items()})
        hs.append(q * f ** (q - 1) * norm2 + lip * f**q)
    denominator = sum(hs)
    return stepped(start, models, parameters,
                   lambda name, _: sum(d[name] for d in deltas) / denominator if denominator > 0 else 0.0,
                   lambda name: sum(m[name].to(torch.float64) for m in models) / len(models))


@register
class QFFL(Algorithm):
    name = "qffl"
    shares = "the model and its loss"
    keeps_client_state = False
    Params = QFFLParams
    no_robust_aggregation = ("its step weighs each client's update by its loss to the power q; a robust aggregator "
                             "hands it one aggregate for every client, leaving nothing to weigh")

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        start = self.working_model(payload["model"], key="qffl_start", device=ctx.device)
        loss = training_loss(start, data, ctx.device)
        stats = {"loss": torch.tensor(loss, dtype=torch.float64),
                 "lipschitz": torch.tensor(self.params.lipschitz or 1.0 / ctx.lr, dtype=torch.float64)}
        return ClientUpdate(data.client_id, data.num_samples, tensors=trained, stats=stats,
                            metrics={"train_loss": train_loss}), client_state

    def aggregate(self, state, updates, round_idx):
        if not updates:
            return state
        model = qffl_step(state["model"], [u.tensors for u in updates], [float(u.stats["loss"]) for u in updates],
                          [float(u.stats["lipschitz"]) for u in updates], self.params.q,
                          parameter_names(self.working_model()))
        return {**state, "model": model}
