"""Local: every client trains its own model on its own data and never communicates.

All clients start from the same θ⁰ (docs/methods/fednh.md §12.1). Judged by personalized accuracy on each client's own
test split; there is no global model.
"""
from __future__ import annotations

from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    ClientUpdate,
    LocalObjective,
    RoundContext,
    count_correct,
    state_of,
)
from tasks.algorithms.registry import register


@register
class Local(Algorithm):
    name = "local"
    shares = "nothing"
    personalized = True
    has_global_model = False

    def init_global(self):
        return {}

    def payload(self, state, round_idx):
        return {}

    def aggregate(self, state, updates, round_idx):
        return state

    def init_client(self, data: ClientData):
        return {"model": state_of(self.new_model())}

    def local_objective(self, payload, data, client_state, ctx):
        return LocalObjective(start=client_state["model"])

    def client_result(self, trained, train_loss, payload, data: ClientData, client_state, ctx: RoundContext):
        return ClientUpdate(data.client_id, data.num_samples, metrics={"train_loss": train_loss}), {"model": trained}

    def client_evaluate(self, payload, data: ClientData, client_state, ctx: RoundContext):
        model = self.working_model(client_state["model"], device=ctx.device)
        return {"acc": (count_correct(model, data.x_test, data.y_test), len(data.y_test))}
