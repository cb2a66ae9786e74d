"""FedNova (Wang, Liu, Liang, Joshi, Poor 2020, "Tackling the Objective Inconsistency Problem in Heterogeneous
Federated Optimization"): normalised averaging by each client's effective number of local steps
(docs/methods/fednova.md).

Clients train as FedAvg's do. Client i, after τ_i local steps of SGD with momentum β, has moved by
x − y_i = η·Σ_j a_ij·g_ij with ‖a_i‖₁ = [τ_i − β(1 − β^τ_i)/(1 − β)]/(1 − β) (τ_i for plain SGD;
tasks/algorithms/local_sgd.py), and sends y_i with ‖a_i‖₁ (one number). The server (eq. 7):

    d_i = (x − y_i)/‖a_i‖₁,   τ_eff = Σ_i p_i·‖a_i‖₁,   x ← x − τ_eff·Σ_i p_i·d_i

with p_i = n_i/Σ_{j∈S} n_j (or uniform). Equal τ_i give FedAvg's x̄ back. Buffers take the p-weighted mean.
"""
from __future__ import annotations

import torch

from tasks.algorithms.base import Algorithm, ClientUpdate
from tasks.algorithms.local_sgd import effective_steps
from tasks.algorithms.model_state import stepped
from tasks.algorithms.registry import register
from tasks.algorithms.server_optimizers import parameter_names


def normalized_average(start: dict, models: list[dict], steps: list[float], weights: list[float],
                       parameters: set[str]) -> dict:
    """x − τ_eff·Σ_i p_i·(x − y_i)/‖a_i‖₁ for the parameters, Σ_i p_i·y_i for the buffers (FedNova, eq. 7)."""
    total = float(sum(weights))
    p = [w / total for w in weights]
    tau_eff = sum(pi * a for pi, a in zip(p, steps))
    return stepped(start, models, parameters,
                   lambda name, x64: tau_eff * sum(pi * (x64 - y[name].to(torch.float64)) / a
                                                   for pi, y, a in zip(p, models, steps) if a > 0),
                   lambda name: sum(pi * y[name].to(torch.float64) for pi, y in zip(p, models)))


@register
class FedNova(Algorithm):
    name = "fednova"
    shares = "the model, normalised by its local steps"
    keeps_client_state = False
    follows_averaging = True
    no_robust_aggregation = ("it averages each client's update divided by its own step count; a robust aggregator "
                             "hands it one aggregate of the raw updates, so the normalisation would be lost")
    plain_sgd = "each client's τ_i becomes ‖a_i‖₁, its momentum-weighted step count (docs/methods/fednova.md §3)"

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        steps = effective_steps(ctx.local_steps, ctx.train.momentum)
        update = ClientUpdate(data.client_id, data.num_samples, tensors=trained,
                              stats={"steps": torch.tensor(steps, dtype=torch.float64)},
                              metrics={"train_loss": train_loss})
        return update, client_state

    def aggregate(self, state, updates, round_idx):
        if not updates:
            return state
        model = normalized_average(state["model"], [u.tensors for u in updates],
                                   [float(u.stats["steps"]) for u in updates], self.aggregation_weights(updates),
                                   parameter_names(self.working_model()))
        return {**state, "model": model}
