"""What a host hands its engine (orchestrator/clients/client_engines.py) for an UPDATE call: the method, the payload
on the host's device, the call's clients by group, each client's round as a `ClientTurn` (its data, its state as the
round begins, its round context), and what becomes of an update as it leaves its client (`leave`: the client's next
state kept, the privacy step). Turns are made one by one as the engine takes them: making one may seed torch's
global generator for its client, just before that client trains. The engines import this, never the host
(orchestrator/clients/client_host.py), which imports them."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from tasks.algorithms import ClientData, ClientUpdate, RoundContext
from tasks.algorithms.base import State
from tasks.algorithms.client_side import ClientAlgorithm


@dataclass(frozen=True)
class ClientTurn:
    """One client's round as its host hands it over."""

    cid: int
    data: ClientData
    state: State  # the client's state as the round begins
    ctx: RoundContext
    started: float  # time.perf_counter() as its host began to make it: the client's seconds count from there


@dataclass(frozen=True)
class HostedCall:
    """An UPDATE call as a host hands it to its engine."""

    algorithm: ClientAlgorithm
    round: int
    payload: Any  # on the host's device
    client_ids: list[int]  # in the call's order
    groups: list[list[int]]  # the same clients by group, in group order (orchestrator/clients/client_groups.py)
    summed: bool  # resources.partial_sums: one partial sum per group instead of each model
    uniform: bool  # privacy.models: each update clipped as it leaves its client, weighing 1 in its partial sum
    # the turns of these clients, in their order, each made as it is taken; True: torch's generator seeded for it
    turns: Callable[[list[int], bool], Iterator[ClientTurn]]
    # (turn, update, the client's next state, the hook that returned it) -> the update as it leaves its client
    leave: Callable[[ClientTurn, ClientUpdate, State, str], ClientUpdate]

    def to(self, group: list[int]) -> HostedCall:
        """The call for one of its groups."""
        return replace(self, client_ids=group, groups=[group])
