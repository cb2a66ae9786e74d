"""FedBN (Li, Jiang, Zhang, Kamp, Dou 2021, "FedBN: Federated Learning on Non-IID Features via Local Batch
Normalization"): BatchNorm layers stay on their client, everything else is averaged (docs/methods/fedbn.md).

Client k trains (cross-entropy, as FedAvg) from the global model with its own BatchNorm tensors in place (weight,
bias, running mean and variance, counter; the received ones on its first round), keeps those as its state and
sends the rest up. The server averages what it receives (Algorithm 1: w ← Σ_k n_k·w_k/Σ n_k over the non-BN
tensors). There is no global model: each client is evaluated with its own BatchNorm layers on its own test split,
as the paper evaluates. Needs a model with BatchNorm (`digits_cnn_bn`); on one without, it is FedAvg judged
per client.
"""
from __future__ import annotations

from functools import cached_property

from torch import nn

from tasks.algorithms.base import Algorithm, ClientUpdate, LocalObjective, count_correct
from tasks.algorithms.registry import register


def batchnorm_keys(model: nn.Module) -> frozenset[str]:
    """The state-dict keys of a model's BatchNorm layers (their affine parameters and running statistics)."""
    prefixes = [f"{name}." for name, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    return frozenset(k for k in model.state_dict() if any(k.startswith(p) for p in prefixes))


@register
class FedBN(Algorithm):
    name = "fedbn"
    shares = "the model without its batch-norm layers"
    personalized = True
    has_global_model = False
    follows_averaging = True

    @cached_property
    def local_keys(self) -> frozenset[str]:
        return batchnorm_keys(self.working_model())

    def local_objective(self, payload, data, client_state, ctx):
        return LocalObjective(start={**payload["model"], **client_state.get("bn", {})})

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        shared = {k: v for k, v in trained.items() if k not in self.local_keys}
        local = {k: v for k, v in trained.items() if k in self.local_keys}
        return ClientUpdate(data.client_id, data.num_samples, tensors=shared,
                            metrics={"train_loss": train_loss}), {"bn": local}

    def aggregate(self, state, updates, round_idx):
        """The non-BN tensors' weighted mean; the global BN tensors stay as initialised (no client sends them)."""
        if not updates:
            return state
        return {**state, "model": {**state["model"], **super().aggregate(state, updates, round_idx)["model"]}}

    def client_evaluate(self, payload, data, client_state, ctx):
        model = self.working_model({**payload["model"], **client_state.get("bn", {})}, device=ctx.device)
        return {"acc": (count_correct(model, data.x_test, data.y_test), len(data.y_test))}
