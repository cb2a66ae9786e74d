"""FedAvg with models communicated only every `a` rounds: FedFM-Lite's equal-budget baseline (docs/methods/fedfm.md §12),
and the model schedule FedFM-Lite shares with it (docs/methods/fedfm.md §4, §11 point 16).

Schedule (the paper leaves the phase open; this is the choice made here): the global model goes down at rounds
t ≡ 0 (mod a), so every client starts from w⁰; clients upload their models at rounds t ≡ a−1 (mod a), and the
server averages them (n_i-weighted). In the rounds between, each client trains on from its own latest model,
kept in its persistent state. Nothing is sent in a round without a model, so the byte counters show the
saving: over T rounds ⌈T/a⌉ models go down and ⌊T/a⌋ come up per client.
"""
from __future__ import annotations

from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    ClientUpdate,
    HyperParams,
    LocalObjective,
    RoundContext,
    State,
    searchable,
    state_of,
    weighted_average,
)
from tasks.algorithms.registry import register


def model_goes_down(round_idx: int, period: int) -> bool:
    return round_idx % period == 0


def model_goes_up(round_idx: int, period: int) -> bool:
    return (round_idx + 1) % period == 0


def average_sent_models(state: State, updates: list[ClientUpdate]) -> State:
    """n_i-weighted average of the models the clients uploaded this round; the old model if none did."""
    sent = [u for u in updates if u.tensors]
    if not sent:
        return state
    return {**state, "model": weighted_average([u.tensors for u in sent], [u.num_samples for u in sent])}


class PeriodicModelSync:
    """Mixin (listed before the Algorithm base): the model goes down and up only every `params.period` rounds."""

    keeps_client_state = True  # the client's latest model, trained on in rounds without a broadcast

    def payload(self, state: State, round_idx: int) -> State:
        payload = dict(super().payload(state, round_idx))
        if not model_goes_down(round_idx, self.params.period):
            payload.pop("model", None)
        return payload

    def uploads_model(self, round_idx: int) -> bool:
        return model_goes_up(round_idx, self.params.period)

    def starting_model(self, payload: State, client_state: State) -> State:
        """The broadcast model, else the client's own latest one, else w⁰ (the same in every process)."""
        if "model" in payload:
            return payload["model"]
        if "model" in client_state:
            return client_state["model"]
        return state_of(self.new_model())

    def next_client_state(self, trained: State, client_state: State) -> State:
        return {**client_state, "model": trained}


class PeriodicParams(HyperParams):
    period: int = searchable(5, 1, 10, integer=True, ge=1, description="a: models communicated every a rounds")


@register
class FedAvgPeriodic(PeriodicModelSync, Algorithm):
    name = "fedavg_periodic"
    shares = "the model every few rounds"
    protocol_variant = True
    Params = PeriodicParams

    def aggregate(self, state, updates, round_idx):
        return average_sent_models(state, updates)

    def local_objective(self, payload, data, client_state, ctx):
        return LocalObjective(start=self.starting_model(payload, client_state))

    def client_result(self, trained, train_loss, payload, data: ClientData, client_state, ctx: RoundContext):
        tensors = trained if self.uploads_model(ctx.round) else {}
        return (ClientUpdate(data.client_id, data.num_samples, tensors=tensors, metrics={"train_loss": train_loss}),
                self.next_client_state(trained, client_state))
