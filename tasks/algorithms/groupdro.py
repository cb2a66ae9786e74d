"""GroupDRO (Sagawa et al., "Distributionally Robust Neural Networks for Group Shifts", ICLR 2020) with the clients
as the groups, as FedDebias's Table 10 runs it (docs/methods/groupdro.md): the server keeps a weight per client,
multiplied by exp(η·l_i) each time client i reports its round's training loss l_i, and averages the round's models
with those weights (normalised over the round's clients) instead of FedAvg's n_i. Starting from w_i = n_i, the
first round is FedAvg's; a client whose loss stays high gains weight.

The weights live in the server state as log-weights, log w_i = log n_i + η·Σ_t l_i^t (checkpointed): the same
multiplicative update without underflow. Clients train as FedAvg's.
"""
from __future__ import annotations

import math

import torch

from tasks.algorithms.base import Algorithm, HyperParams, searchable, weighted_average
from tasks.algorithms.registry import register


class GroupDROParams(HyperParams):
    step_size: float = searchable(0.01, 0.001, 1.0, log=True, gt=0,
                                  description="η: w_i ← w_i·exp(η·l_i) (FedDebias's baseline: 0.01)")


def dro_weights(log_weights: torch.Tensor, client_ids: list[int]) -> list[float]:
    """The round's clients' weights, exp(log w_i − max): normalised by the average, so only ratios matter."""
    chosen = log_weights[client_ids]
    return torch.exp(chosen - chosen.max()).tolist()


@register
class GroupDRO(Algorithm):
    name = "groupdro"
    Params = GroupDROParams
    keeps_client_state = False

    def init_global(self):
        # a client's log-weight starts at log n_i when it first reports (`reported` says which have)
        n = self.setup.num_clients
        return {**super().init_global(), "log_weights": torch.zeros(n, dtype=torch.float64),
                "reported": torch.zeros(n, dtype=torch.bool)}

    no_robust_aggregation = ("it averages the clients' models with weights that grow with their losses; a robust "
                             "aggregator hands it one aggregate for every client, leaving nothing to weigh")

    def aggregate(self, state, updates, round_idx):
        """w_i ← w_i·exp(η·l_i) for the round's clients (w_i = n_i the first time), then their models averaged with
        the new weights (Sagawa et al.'s order: the weights step, then the model)."""
        if not updates:
            return state
        log_weights, reported = state["log_weights"].clone(), state["reported"].clone()
        for u in updates:
            start = float(log_weights[u.client_id]) if reported[u.client_id] else math.log(max(u.num_samples, 1))
            log_weights[u.client_id] = start + self.params.step_size * float(u.metrics["train_loss"])
            reported[u.client_id] = True
        ids = [u.client_id for u in updates]
        model = weighted_average([u.tensors for u in updates], dro_weights(log_weights, ids))
        return {**state, "model": model, "log_weights": log_weights, "reported": reported}

    def round_metrics(self, state, updates, round_idx):
        seen = state["log_weights"][state["reported"]]
        if len(seen) < 2:
            return {}
        share = torch.softmax(seen, dim=0)
        return {"dro_weight_max_share": float(share.max())}
