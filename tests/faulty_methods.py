"""Methods from outside Mooring with a bug in one hook, named in configs by their `module:attribute` reference as a
researcher's own method is (tests/test_failures.py): what a method's failure does to a run. Each fails only while
the file its `flag` names exists, so a resumed run (the bug fixed) goes on with the same config."""
from __future__ import annotations

import os

import torch

from tasks.algorithms.base import Algorithm, HyperParams, cross_entropy


class FaultParams(HyperParams):
    flag: str = ""  # a file: the fault happens while it exists
    round: int = 1  # the round (1-based) it happens in


class Faulty(Algorithm):
    """FedAvg, with a fault where a subclass calls `faulty`."""

    Params = FaultParams
    keeps_client_state = False

    def faulty(self, round_idx: int) -> bool:
        return round_idx + 1 == self.params.round and bool(self.params.flag) and os.path.exists(self.params.flag)


class FailingRoundMetrics(Faulty):
    """Its server-side diagnostics read a key the state does not have."""

    name = "failing_round_metrics"

    def round_metrics(self, state, updates, round_idx):
        if self.faulty(round_idx):
            return {"cc": state["cc"]}
        return {}


class FailingClient(Faulty):
    """Its client code divides by zero, for client 0."""

    name = "failing_client"

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        if self.faulty(ctx.round) and data.client_id == 0:
            return 1 / 0
        return super().client_result(trained, train_loss, payload, data, client_state, ctx)


class FloatLoss(Faulty):
    """Its loss is a Python float, not a tensor."""

    name = "float_loss"

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        return float(cross_entropy(logits, y, weight))


class PerSampleLoss(Faulty):
    """Its loss is a vector (one per sample), not a scalar."""

    name = "per_sample_loss"

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        return torch.nn.functional.cross_entropy(logits, y, reduction="none")


class ObjectState(Faulty):
    """Its client state holds an object that is neither a tensor nor a plain number."""

    name = "object_state"
    keeps_client_state = True

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        update, _ = super().client_result(trained, train_loss, payload, data, client_state, ctx)
        return update, {"seen": {"rounds": [ctx.round], "data": data}}
