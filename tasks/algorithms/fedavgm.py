"""FedAvgM (Hsu, Qi, Brown 2019, "Measuring the Effects of Non-Identical Data Distribution"): FedAvg with server
momentum on the averaged update (docs/methods/fedavgm.md).

With x the global model and x̄ the sample-weighted mean of the clients' models, Δ = x̄ − x and

    v ← β·v + Δ,    x ← x + η·v

(tasks/algorithms/server_optimizers.py, `momentum`: the same block `algorithm.server_optimizer` gives any method).
β = 0, η = 1 is FedAvg. Clients train as FedAvg's do.
"""
from __future__ import annotations

from tasks.algorithms.base import Algorithm, HyperParams, searchable
from tasks.algorithms.registry import register
from tasks.algorithms.server_optimizers import ServerOptimizer, parameter_names


class FedAvgMParams(HyperParams):
    momentum: float = searchable(0.9, 0.0, 0.99, ge=0, lt=1, description="server momentum β")
    server_lr: float = searchable(1.0, 0.1, 2.0, log=True, gt=0, description="server learning rate η")


@register
class FedAvgM(Algorithm):
    name = "fedavgm"
    keeps_client_state = False
    Params = FedAvgMParams
    follows_averaging = True  # the mean x̄ is FedAvg's, weighted by aggregation_weights

    def aggregate(self, state, updates, round_idx):
        """x̄ as FedAvg makes it, then one server momentum step from x (the velocity v in state["momentum"])."""
        if not updates:
            return state
        averaged = super().aggregate(state, updates, round_idx)["model"]
        optimizer = ServerOptimizer("momentum", self.params.server_lr, self.params.momentum)
        model, slots = optimizer.step(state["model"], averaged, state.get("momentum", {}),
                                      parameter_names(self.working_model()))
        return {**state, "model": model, "momentum": slots}
