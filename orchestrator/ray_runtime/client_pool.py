"""A coordinator's clients on client actors (`ActorPool`, one `ClientPool`: orchestrator/server/coordinator_clients.py,
where the other, every client in the coordinator's own process, is).

A round sends the payload with each actor's call (above 100 KiB: puts it in the object store once),
sends each group of the round's clients (orchestrator/clients/client_groups.py), whole, to one actor, collects updates as
they finish, retries a client once if its actor died, and leaves out (and counts) a client whose actor dies twice;
any other error (a method's, an I/O error) stops the round. Clients are hosted block by block, so a group has
one host; a method that keeps client state trains each group there (sticky), the groups of a method that keeps
no client state are balanced over the actors by their local work, at home where loads tie (see `plan_round`). Each actor gets one call per round
with all of its groups: a Ray call costs milliseconds, a small client's update not many more.

By job: actor_lifecycle.py (the actors started, loaded, restarted), client_placement.py (which actor hosts and
trains which clients), actor_evaluation.py (the global evaluation on the actors); here, a call sent and its
answers gathered.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import ObjectLostError, RayActorError

from orchestrator.ray_runtime.actor_evaluation import ActorEvaluation, SentCounts  # noqa: F401  (re-exported)
from orchestrator.ray_runtime.actor_lifecycle import ClientActors
from orchestrator.ray_runtime.client_placement import (  # noqa: F401  (re-exported)
    ClientPlacement,
    assign_clients,
    plan_round,
)

if TYPE_CHECKING:
    from orchestrator.clients.client_calls import ClientCall, ClientResults
    from orchestrator.clients.client_groups import ClientGroups
    from orchestrator.server.federation import Server

# orchestrator.clients.client_calls (and torch with it) is imported where it is used: the coordinator builds its
# `ActorPool` first thing, so that the client actors' processes start while it imports torch.

# A payload up to this size goes with each actor's call (inside the call's message, under Ray's own limit on
# inlined arguments) rather than once into the object store, from which each actor would then fetch it.
INLINE_PAYLOAD_BYTES = 100 * 1024


class ActorPool:
    """The client actors (`actors`: started at construction, their processes importing torch while the coordinator
    prepares, loaded by `start`), where each client goes (`placement`), the global evaluation on them
    (`evaluation`); here a call is sent and its answers gathered."""

    def __init__(self, cfg, num_actors: int, run_dir: str):
        self.cfg = cfg
        self.actors = ClientActors(cfg, num_actors, run_dir)
        self.placement: ClientPlacement | None = None
        self.evaluation: ActorEvaluation | None = None

    def start(self, data_box: list, server: Server, groups: ClientGroups, costs: list[float] | None) -> None:
        """Every actor loaded with `data_box` = [ObjectRef of the FederatedData] and whole blocks of clients
        (`groups`: the run's client groups), so a group has one host; `costs`: each client's local work in forward
        passes of one sample (client_work.py), to balance a round's groups by (None: sticky)."""
        self.server = server
        self.placement = ClientPlacement(groups, len(self.actors.handles), costs)
        self.actors.host(data_box, self.placement.hosted, lambda: server.round)
        self.actors.await_all(self.cfg.resources.actor_start_timeout)
        self.evaluation = ActorEvaluation(self.cfg, self.actors, server, costs)
        self.evaluation.install()

    def call(self, call: ClientCall) -> ClientResults:
        """`call` on the client actors, its payload put into the object store once if it is large."""
        return self._send(call)()

    def begin(self, call: ClientCall) -> Callable[[], ClientResults]:
        """The next round's `call`, begun as the round before it ends: sent now (after the counts of that round's
        evaluation, where the actors split it: `ActorEvaluation.count_ahead`); what it returns waits for the
        results."""
        return self._send(call, ahead=True)

    def _send(self, call: ClientCall, ahead: bool = False) -> Callable[[], ClientResults]:
        """`call` sent to the client actors now; what it returns waits for their results. One call per actor; an
        actor's clients are retried once if it died, and fail if it dies again."""
        from tasks.algorithms.base import nbytes

        with self.server.phases(f"{call.name}: payload put"):
            if nbytes(call.payload) > INLINE_PAYLOAD_BYTES:
                call = call.with_payload(ray.put(call.payload))
        sent = time.perf_counter()
        plan = self.placement.plan(call.client_ids)
        if ahead:
            self.evaluation.count_ahead(plan)
        pending = {self._call(a, call.to(group)): (a, group, 0) for a, group in plan.items()}
        self.server.phases.add(f"{call.name}: dispatch", time.perf_counter() - sent)
        return lambda: self._gather(call, pending, sent)

    def _gather(self, call: ClientCall, pending: dict, sent: float) -> ClientResults:
        """The answers to `call`'s `pending` actor calls (ObjectRef: (actor, its clients, attempt)), sent at `sent`."""
        from orchestrator.clients.client_calls import ClientResults

        phases = self.server.phases
        gathered = ClientResults()
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            actor_idx, group, attempt = pending.pop(done[0])
            try:
                answer = ray.get(done[0])
            except (RayActorError, ObjectLostError):
                answer = None  # died during the call, or its answer was lost with its node
            if answer is None:  # died, or restarted since the last call
                if attempt == 0 and self.actors.await_ready(actor_idx):
                    pending[self._call(actor_idx, call.to(group))] = (actor_idx, group, 1)
                else:
                    gathered.errors.update({cid: f"its actor (#{actor_idx}) died twice" for cid in group})
                    print(f"round {call.round + 1}: client actor #{actor_idx} died twice in {call.name}; its "
                          f"clients {', '.join(map(str, group))} are left out", flush=True)
                continue
            answered, host_seconds = answer
            # what a call costs beyond the host's own work: the Ray round trip, (de)serialising payload and results
            phases.add(f"{call.name}: actor host work", host_seconds)
            phases.add(f"{call.name}: actor call beyond it", time.perf_counter() - sent - host_seconds)
            gathered.add(answered)
        return gathered

    def _call(self, actor_idx: int, call: ClientCall):
        return self.actors.handles[actor_idx].call.remote(call.with_payload(None), call.payload)

    def changed_states(self, since: int | None, until: int, keep: list[int]) -> dict[int, dict[str, Any]]:
        # an actor restarted since the last call gets its data and state back
        for idx in range(len(self.actors.handles)):
            self.actors.await_ready(idx)
        changed: dict[int, dict[str, Any]] = {}
        for part in ray.get([a.checkpoint_states.remote(since, until, keep) for a in self.actors.handles]):
            changed.update(part)
        return changed

    def info(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Each client actor's `info` (ClientActors.info)."""
        return self.actors.info(timeout)
