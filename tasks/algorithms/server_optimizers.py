"""A server-side optimiser on the aggregated update, one building block for FedAvgM, FedAdam and FedYogi.

With x the global model before the round and x̄ what the method's `aggregate` made of the clients' models, the
round's pseudo-gradient is Δ = x̄ − x (where the clients moved, on average), and the server steps (per tensor,
element-wise; Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2; Hsu et al. 2019, FedAvgM):

    momentum (FedAvgM):  v ← β₁·v + Δ;                         x ← x + η·v
    adam     (FedAdam):  m ← β₁·m + (1 − β₁)·Δ;  v ← β₂·v + (1 − β₂)·Δ²;                  x ← x + η·m/(√v + τ)
    yogi     (FedYogi):  m as adam;              v ← v − (1 − β₂)·Δ²·sign(v − Δ²);      x ← x + η·m/(√v + τ)

m and v start at 0 and τ² (Reddi's v₋₁ ≥ τ²); there is no bias correction, as in the paper. η = 1 with β₁ = 0
(momentum) gives x̄ back: FedAvg. Only the model's parameters step; its buffers (BatchNorm's running statistics,
counters) take the aggregate as it is. The moments live in the server state under the optimiser's key, so
checkpoints carry them. Used by `algorithm.server_optimizer` (orchestrator/server/federation.py) for any method with a
global model, and by FedAvgM (tasks/algorithms/fedavgm.py; docs/methods/fedavgm.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

State = dict

# η where the config leaves it out: FedAvgM's 1 (its update is then FedAvg's plus momentum), and for the adaptive
# ones the middle of the range over which Reddi et al. report their best server learning rates (10^-2 … 10^-0.5)
DEFAULT_LR = {"momentum": 1.0, "adam": 0.01, "yogi": 0.01}


@dataclass(frozen=True)
class ServerOptimizer:
    name: str  # "momentum" | "adam" | "yogi"
    lr: float  # η
    beta1: float = 0.9  # β₁: momentum (FedAvgM's β)
    beta2: float = 0.99  # β₂: the second moment's decay (adam, yogi)
    tau: float = 1e-3  # τ: adaptivity (adam, yogi)

    def step(self, model: State, averaged: State, slots: State, parameters: set[str]) -> tuple[State, State]:
        """(the new global model, the new moments) from the model before the round, the round's aggregate and the
        moments so far ({} in the first round); `parameters`: the names that step (the others take the aggregate)."""
        new_model, new_slots = dict(averaged), {}
        for name in parameters:
            x, delta = model[name], averaged[name].to(model[name].dtype) - model[name]
            first = slots.get("m", {}).get(name, torch.zeros_like(x))
            if self.name == "momentum":
                m = self.beta1 * first + delta
                new_model[name] = x + self.lr * m
                new_slots.setdefault("m", {})[name] = m
                continue
            v = slots.get("v", {}).get(name, torch.full_like(x, self.tau**2))
            m = self.beta1 * first + (1 - self.beta1) * delta
            square = delta * delta
            if self.name == "adam":
                v = self.beta2 * v + (1 - self.beta2) * square
            else:
                v = v - (1 - self.beta2) * square * torch.sign(v - square)
            new_model[name] = x + self.lr * m / (v.sqrt() + self.tau)
            new_slots.setdefault("m", {})[name] = m
            new_slots.setdefault("v", {})[name] = v
        return new_model, new_slots


def parameter_names(model: torch.nn.Module) -> set[str]:
    """The names in a model's state dict that are parameters (not buffers): those a server optimiser steps."""
    return {name for name, _ in model.named_parameters()}
