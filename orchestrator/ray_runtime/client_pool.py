"""A coordinator's clients on client actors (`ActorPool`, one `ClientPool`: orchestrator/server/coordinator_clients.py,
where the other, every client in the coordinator's own process, is).

A round sends the payload with each actor's call (above 100 KiB: puts it in the object store once),
sends each group of the round's clients (orchestrator/clients/client_groups.py), whole, to one actor, collects updates as
they finish, retries a client once if its actor died, and leaves out (and counts) a client whose actor dies twice;
any other error (a method's, an I/O error) stops the round. Clients are hosted block by block, so a group has
one host; a method that keeps client state trains each group there (sticky), the groups of a method that keeps
no client state are balanced over the actors by their local work, at home where loads tie (see `plan_round`). Each actor gets one call per round
with all of its groups: a Ray call costs milliseconds, a small client's update not many more.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import ray
from ray.exceptions import GetTimeoutError, ObjectLostError, RayActorError

from orchestrator.ray_runtime.split_evaluation import (
    evaluates_over_client_actors,
    evaluation_fractions,
    evaluation_shares,
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


def assign_clients(num_clients: int, num_actors: int) -> list[list[int]]:
    """Sticky round-robin assignment: client c lives on actor c mod K, for the whole run."""
    return [list(range(a, num_clients, num_actors)) for a in range(num_actors)]


def plan_round(groups: list[list[int]], owner: dict[int, int], num_actors: int,
               costs: list[float] | None) -> dict[int, list[int]]:
    """Which actor trains which of a round's groups of clients, each group whole: {actor index: client ids}.

    Sticky (costs None, methods with client state): each group on the actor that hosts it (a block of clients
    is hosted by one actor). Balanced: the group of most work first, each to the least loaded actor (ties: the
    host of its first client, else the lower index); a random draw of 10 clients out of 100 puts 7 on one of two
    actors as often as not, which would leave one core idle for much of a round."""
    plan: dict[int, list[int]] = {}
    if costs is None:
        for group in groups:
            plan.setdefault(owner[group[0]], []).extend(group)
        return plan
    load = [0.0] * num_actors
    for group in sorted(groups, key=lambda g: (-sum(costs[c] for c in g), g[0])):
        actor_idx = min(range(num_actors), key=lambda a: (load[a], a != owner.get(group[0]), a))
        load[actor_idx] += sum(costs[c] for c in group)
        plan.setdefault(actor_idx, []).extend(group)
    return plan


class SentCounts(NamedTuple):
    """An evaluation's counts sent to the actors ahead of the round begun after it: the state they count for,
    and the actors' answers to come."""

    state: Any
    refs: list


class ActorPool:
    """The client actors, started at construction (their processes import torch while the coordinator prepares),
    loaded by `start`."""

    def __init__(self, cfg, num_actors: int, run_dir: str):
        from orchestrator.ray_runtime.client_actor import ClientActor

        self.cfg, self.run_dir = cfg, run_dir
        res = cfg.resources
        self.hosted = assign_clients(cfg.data.num_clients, num_actors)  # until `start` knows the client groups
        self.actors = [
            ClientActor.options(num_cpus=res.cpus_per_actor, num_gpus=res.gpus_per_actor).remote(
                cfg, hosted, run_dir, max(1, int(res.cpus_per_actor)))
            for hosted in self.hosted
        ]
        self.loaded = [False] * len(self.actors)  # loaded once: a later load is a restart (actors.json)
        # the global model's evaluation split over the actors (split_evaluation.py); a method without one has none
        self.splits_evaluation = False
        self.sent_counts: SentCounts | None = None  # an evaluation's counts, sent ahead of a round begun
        self.restarts = [0] * len(self.actors)

    def start(self, data_box: list, server: Server, groups: ClientGroups, costs: list[float] | None) -> None:
        """Every actor loaded with `data_box` = [ObjectRef of the FederatedData] and whole blocks of clients
        (`groups`: the run's client groups), so a group has one host; `costs`: each client's local work in forward passes of one sample (client_work.py), to
        balance a round's groups by (None: sticky)."""
        self.data_box, self.server, self.client_groups, self.costs = data_box, server, groups, costs
        self.hosted = groups.hosts(len(self.actors))
        self.owner = {c: a for a, hosted in enumerate(self.hosted) for c in hosted}
        self._await_actors(self.cfg.resources.actor_start_timeout)
        self.evaluator = self._gpu_actor() if self.cfg.resources.evaluate_on == "auto" else None
        if self.evaluator is not None:
            server.global_accuracies = self._global_accuracies_on_actor
        elif server.algorithm.capabilities().global_model and evaluates_over_client_actors(
                self.cfg, server.algorithm, len(self.actors)):
            self.splits_evaluation = True
            server.global_accuracies = self._global_accuracies_over_actors

    def _gpu_actor(self) -> int | None:
        """The first client actor that computes on a GPU: the global model is evaluated there."""
        return next((idx for idx, info in enumerate(self.info()) if info.get("device") == "cuda"), None)

    def _global_accuracies_on_actor(self, state) -> dict[str, float] | None:
        """Global evaluation on the GPU of a client actor; on this CPU if that actor is gone for good."""
        from orchestrator.clients.global_evaluation import accuracies_on_test_sets

        state_ref = ray.put(state)
        for _ in range(2):
            try:
                answer = ray.get(self.actors[self.evaluator].evaluate_global.remote(state_ref, self.cfg.eval.batch_size))
            except RayActorError:
                answer = False
            if answer is not False:
                return answer
            if not self._await_ready(self.evaluator):
                break
        server = self.server
        return accuracies_on_test_sets(server.algorithm, state, server.test_sets, self.cfg.eval.batch_size)

    def _global_accuracies_over_actors(self, state) -> dict[str, float] | None:
        """Global evaluation split over the client actors, each counting the correct predictions of its share of
        every test set (split_evaluation.py); the counts add up exactly, so the accuracies are the ones of one
        process. Its counts were sent ahead of the next round's training where that round was begun
        (`_count_ahead`); on this CPU if an actor is gone."""
        from orchestrator.clients.global_evaluation import accuracies_on_test_sets

        server = self.server
        sent, self.sent_counts = self.sent_counts, None
        counts = sent.refs if sent is not None and sent.state is state else self._send_counts(state, {})
        with server.phases("evaluate: on the client actors"):
            try:
                answers = ray.get(counts)
            except (RayActorError, ObjectLostError):
                answers = [False]
        if any(answer is False for answer in answers):
            return accuracies_on_test_sets(server.algorithm, state, server.test_sets, self.cfg.eval.batch_size)
        return {name: sum(answer[name] for answer in answers) / max(1, n) for name, n in self._test_sizes().items()}

    def _test_sizes(self) -> dict[str, int]:
        return {name: len(y) for name, (_, y) in self.server.test_sets.items()}

    def _send_counts(self, state, plan: dict[int, list[int]]) -> list:
        """Each actor asked to count the correct predictions of its share of the test sets, the shares weighed
        against the training `plan` sends it next ({actor: clients}), so that the actors finish together."""
        sizes = self._test_sizes()
        queued = [sum(self.costs[c] for c in plan.get(a, [])) if self.costs else 0.0 for a in range(len(self.actors))]
        shares = evaluation_shares(sizes, evaluation_fractions(queued, sum(sizes.values())))
        state_ref = ray.put(state)
        return [actor.count_correct.remote(state_ref, share, self.cfg.eval.batch_size)
                for actor, share in zip(self.actors, shares) if any(end > start for start, end in share.values())]

    def _count_ahead(self, plan: dict[int, list[int]]) -> None:
        """For a round begun ahead as the round before it ends with an evaluation due: that evaluation's counts
        sent before the round's training, so that the ending round's metrics need not wait for it."""
        server = self.server
        if self.splits_evaluation and server.eval_due():
            with server.phases("evaluate: sent ahead of the next round's training"):
                self.sent_counts = SentCounts(server.state, self._send_counts(server.state, plan))

    def _await_actors(self, timeout: float) -> None:
        """Every client actor placed, constructed and loaded (restarted, if its node was lost meanwhile), or one
        clear error: never a silent wait. The actors are loaded together, not one after another; any that died
        meanwhile is then waited for (and loaded) on its own."""
        deadline = time.monotonic() + timeout
        pings = [actor.ping.remote() for actor in self.actors]
        ray.wait(pings, num_returns=len(pings), timeout=timeout)
        loads = []
        for idx, (actor, ping) in enumerate(zip(self.actors, pings)):
            try:
                if not ray.get(ping, timeout=0):
                    loads.append(actor.load.remote(self.data_box, self.server.round, self.hosted[idx]))
            except (RayActorError, GetTimeoutError):
                pass  # not up yet, or died: `_await_ready` below waits for it
        for load in loads:
            try:
                ray.get(load)
            except RayActorError:
                pass
        for idx in range(len(self.actors)):
            if not self._await_ready(idx, max(1.0, deadline - time.monotonic())):
                raise RuntimeError(f"client actors not placed within {timeout:g} s: the cluster lacks the CPUs/GPUs "
                                   f"for {len(self.actors)} actors (resources.num_actors, cpus_per_actor, "
                                   "gpus_per_actor)")
        self.loaded = [True] * len(self.actors)

    def call(self, call: ClientCall) -> ClientResults:
        """`call` on the client actors, its payload put into the object store once if it is large."""
        return self._send(call)()

    def begin(self, call: ClientCall) -> Callable[[], ClientResults]:
        """The next round's `call`, begun as the round before it ends: sent now (after the counts of that round's
        evaluation, where the actors split it: `_count_ahead`); what it returns waits for the results."""
        return self._send(call, ahead=True)

    def _send(self, call: ClientCall, ahead: bool = False) -> Callable[[], ClientResults]:
        """`call` sent to the client actors now; what it returns waits for their results. One call per actor; an
        actor's clients are retried once if it died, and fail if it dies again."""
        from tasks.algorithms.base import nbytes

        with self.server.phases(f"{call.name}: payload put"):
            if nbytes(call.payload) > INLINE_PAYLOAD_BYTES:
                call = call.with_payload(ray.put(call.payload))
        sent = time.perf_counter()
        groups = self.client_groups.split(call.client_ids)
        plan = plan_round(groups, self.owner, len(self.actors), self.costs)
        if ahead:
            self._count_ahead(plan)
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
                if attempt == 0 and self._await_ready(actor_idx):
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
        return self.actors[actor_idx].call.remote(call.with_payload(None), call.payload)

    def _await_ready(self, actor_idx: int, timeout: float = 120.0) -> bool:
        """Wait until an actor answers (Ray restarts a dead one), and load it if it is new."""
        deadline = time.monotonic() + timeout
        actor = self.actors[actor_idx]
        while time.monotonic() < deadline:
            try:
                if not ray.get(actor.ping.remote(), timeout=max(1.0, deadline - time.monotonic())):
                    ray.get(actor.load.remote(self.data_box, self.server.round, self.hosted[actor_idx]),
                            timeout=max(1.0, deadline - time.monotonic()))
                    self._loaded(actor_idx)
                return True
            except (RayActorError, GetTimeoutError):
                time.sleep(0.5)
        return False

    def _loaded(self, actor_idx: int) -> None:
        """Count a load after the first as a restart, and record it in actors.json."""
        if self.loaded[actor_idx]:
            self.restarts[actor_idx] += 1
            from orchestrator.clients.run_host import write_actor_info

            write_actor_info(self.run_dir, self.info())
        self.loaded[actor_idx] = True

    def changed_states(self, since: int | None, until: int, keep: list[int]) -> dict[int, dict[str, Any]]:
        for idx in range(len(self.actors)):  # an actor restarted since the last call gets its data and state back
            self._await_ready(idx)
        changed: dict[int, dict[str, Any]] = {}
        for part in ray.get([a.checkpoint_states.remote(since, until, keep) for a in self.actors]):
            changed.update(part)
        return changed

    def info(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Each client actor's `info`; with a timeout, an actor that does not answer in time (lost, or waiting
        for a node to restart on) is listed as unreachable instead of holding up the caller."""
        refs = [a.info.remote() for a in self.actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        out = []
        for idx, ref in enumerate(refs):
            try:
                out.append(ray.get(ref) if ref in ready else {"unreachable": True, "clients": self.hosted[idx]})
            except RayActorError:
                out.append({"unreachable": True, "clients": self.hosted[idx]})
        return [info | {"restarts": n} for info, n in zip(out, self.restarts)]
