"""A method's server side: the hooks the server's round calls, with FedAvg's behaviour (`ServerSide`, which
`Algorithm` inherits), and the method as the server's runtime sees it (`ServerAlgorithm`: what orchestrator/server/
calls of it beside the whole method it builds).

    state = init_global()                  # model tensors, anchors or prototypes, extras
    for t in rounds:
        payload = payload(state, t)        # what goes down to this round's clients
        ...                                # the clients' updates (tasks/algorithms/client_side.py)
        state = aggregate(state, updates, t)   # in client-id order, so results never depend on timing
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from tasks.algorithms.method_core import MethodCore
from tasks.algorithms.model_state import state_of
from tasks.models import FLModel
from tasks.types import ClientUpdate, State, weighted_average


class ServerSide:
    """The hooks the server's round calls, each FedAvg's; of the rest of the method they read its `setup`,
    `default_averaging`, `capabilities()` and models (`new_model`, `working_model`), all `Algorithm`'s."""

    def init_global(self) -> State:
        return {"model": state_of(self.new_model())}

    def payload(self, state: State, round_idx: int) -> State:
        """What is broadcast this round (counted as bytes sent down to each sampled client)."""
        return {"model": state["model"]}

    def aggregate(self, state: State, updates: list[ClientUpdate], round_idx: int) -> State:
        if not updates:
            return state
        return {**state, "model": weighted_average([u.tensors for u in updates], self.aggregation_weights(updates))}

    @property
    def averaging(self) -> str:
        """"samples" or "uniform": algorithm.averaging where set, else the method's own default."""
        return self.setup.averaging or self.default_averaging

    def aggregation_weights(self, updates: list[ClientUpdate]) -> list[float]:
        """Each update's weight in the server's average: its client's sample count n_k, or 1 (uniform)."""
        return [1.0 if self.averaging == "uniform" else u.num_samples for u in updates]

    def global_model(self, state: State) -> FLModel | None:
        return self.working_model(state["model"], key="eval") if self.capabilities().global_model else None

    def round_metrics(self, state: State, updates: list[ClientUpdate], round_idx: int) -> dict[str, float]:
        """Server-side diagnostics logged each round (anchor distances, classifier similarity, ...)."""
        return {}

    # one-off exchange before round 0 (FedDebias' shared pseudo-data): the server folds the clients'
    # `client_setup` contributions; it runs for a method that defines server_setup
    def server_setup(self, state: State, contributions: list[State]) -> State:
        return state

    # an exchange at the start of every round, before training, with the same clients (FedFM's anchors): the
    # server folds their `client_pre_round` contributions into the state, and the round's payload is taken again
    # from the new state; it runs for a method that defines server_pre_round
    def server_pre_round(self, state: State, contributions: list[State], round_idx: int) -> State:
        return state


@runtime_checkable
class ServerAlgorithm(MethodCore, Protocol):
    """A method as the server's runtime calls it: `ServerSide`'s hooks and, of the whole method, its name, its
    capabilities and its per-process models."""

    def init_global(self) -> State: ...

    def payload(self, state: State, round_idx: int) -> State: ...

    def aggregate(self, state: State, updates: list[ClientUpdate], round_idx: int) -> State: ...

    @property
    def averaging(self) -> str: ...

    def aggregation_weights(self, updates: list[ClientUpdate]) -> list[float]: ...

    def global_model(self, state: State) -> FLModel | None: ...

    def round_metrics(self, state: State, updates: list[ClientUpdate], round_idx: int) -> dict[str, float]: ...

    def server_setup(self, state: State, contributions: list[State]) -> State: ...

    def server_pre_round(self, state: State, contributions: list[State], round_idx: int) -> State: ...
