"""What the server asks of its clients and what comes back, as types: a `ClientCall` (one kind, a payload, the
clients, the round) in, a `ClientResults` (each client's result, the partial sums, each failed client's error)
out. The same objects travel in one process (orchestrator/server/federation.py: `in_process_calls`) and over Ray
(orchestrator/ray_runtime/actors.py), so a round reads the same on both."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from orchestrator.clients.partial_sums import PartialSum


class CallKind(Enum):
    """A client call's kind; its value names it in the run's profile (`mooring run --profile`)."""

    SETUP = "setup_contribution"  # the set-up exchange's contribution (methods with setup_exchange)
    PRE_ROUND = "pre_round"  # the pre-round exchange's contribution (methods with pre_round_exchange)
    UPDATE = "update"  # the round's local training
    EVALUATE = "evaluate"  # the client's own (personalized) model on its test data
    EVALUATE_GLOBAL = "evaluate_global_per_client"  # the global model (the payload: its state) on the client's test data
    CALIBRATE = "calibrate"  # class statistics under the global model (algorithm.calibration: orchestrator/server/calibration.py)


@dataclass(frozen=True)
class ClientCall:
    """One kind of work for some clients in one round. `summed` (UPDATE only, resources.partial_sums): the updates
    come back without their models, folded into partial sums where they trained."""

    kind: CallKind
    payload: Any
    client_ids: list[int]
    round: int
    summed: bool = False

    @property
    def name(self) -> str:
        return "update_summed" if self.summed else self.kind.value

    def to(self, client_ids: list[int]) -> ClientCall:
        """The same call for some of its clients (one actor's share)."""
        return replace(self, client_ids=client_ids)

    def with_payload(self, payload: Any) -> ClientCall:
        return replace(self, payload=payload)


@dataclass
class ClientResults:
    """A call's answers: `results` {client: result} in client-id order, the partial sums of summed updates (their
    clients' results then carry no model), and {client: one-line error} of the clients that failed: whose actor
    was lost twice (orchestrator/ray_runtime/client_pool.py). A client host never fails a client alone: a method's exception
    or an I/O error stops the call."""

    results: dict[int, Any] = field(default_factory=dict)
    partial_sums: list[PartialSum] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)

    def add(self, other: ClientResults) -> None:
        self.results.update(other.results)
        self.partial_sums += other.partial_sums
        self.errors.update(other.errors)

    @property
    def failed(self) -> list[int]:
        return sorted(self.errors)


# call(ClientCall) -> ClientResults: the call for each of its clients, in this process or on the client actors
CallClients = Callable[[ClientCall], ClientResults]

# begin(ClientCall) -> a function that returns its ClientResults: the call under way on the client actors while
# its caller does other work (orchestrator/ray_runtime/client_pool.py: ActorPool.begin)
BeginCall = Callable[[ClientCall], Callable[[], ClientResults]]
