"""The Ray runtime: client actors (fractional GPUs, many logical clients each) and the coordinator actor.

The coordinator owns the `Server` (global state and round loop); each client actor owns a `ClientHost`.
A round sends the payload with each actor's call (above 100 KiB: puts it in the object store once), sends
each sampled client to the actor that hosts it (sticky assignment), collects updates as they finish, retries
a client once if its actor died, and leaves out (and counts) a client that fails twice. Clients of a method
that keeps no client state are instead balanced over the actors by their local work (see `plan_round`). Each
actor gets one call per round with all of its clients: a Ray call costs milliseconds, a small client's update
not many more.
"""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import GetTimeoutError, ObjectLostError, RayActorError

from orchestrator import checkpoint as ckpt
from orchestrator import wire
from orchestrator.client_store import ClientStateStore, states_dir

if TYPE_CHECKING:
    from orchestrator.client_calls import ClientCall, ClientResults
    from orchestrator.client_host import ClientHost

# orchestrator.federation (and torch with it) is imported where it is used, not here: a worker imports this
# module before it constructs an actor, and the coordinator starts the client actors first thing, so their
# processes start (and import torch) while it imports torch itself.


@ray.remote(max_restarts=-1, max_task_retries=0)
class ClientActor:
    """A Ray actor hosting logical clients, given its data by `load` after construction.

    The data is not a constructor argument: Ray restarts a crashed actor by running its constructor again, and
    cannot promise that an object-store argument is still there (ray-project/ray#53727; it warns about every
    such actor). So a (re)started actor answers `ping` with False until the coordinator loads it, and `load`
    also finds its clients' states in the run directory (orchestrator/client_store.py)."""

    def __init__(self, cfg, client_ids: list[int], run_dir: str, threads: int):
        import torch
        import torch._dynamo  # noqa: F401 - else the first optimizer imports it, inside round 1 (benchmarks/README.md)

        torch.set_num_threads(max(1, threads))
        wire.register()
        self.cfg, self.client_ids, self.run_dir = cfg, client_ids, run_dir
        self.gpu_ids = [str(g) for g in ray.get_gpu_ids()]
        self.device = "cuda" if self.gpu_ids and torch.cuda.is_available() else "cpu"
        self.host: ClientHost | None = None

    def load(self, data_box: list, rounds_done: int) -> None:
        """`data_box` = [ObjectRef of the FederatedData], which the run keeps alive; `rounds_done`: the round
        the run is at (states written after it are from a run that went further, and are dropped)."""
        from orchestrator.client_host import ClientHost

        store = ClientStateStore(states_dir(self.run_dir), self.cfg.resources.resident_clients, self.client_ids,
                                 upto=rounds_done, keep=ckpt.checkpoint_rounds(self.run_dir))
        self.host = ClientHost(self.cfg, ray.get(data_box[0]), self.client_ids, device=self.device, store=store)

    def call(self, call: ClientCall, payload) -> tuple[ClientResults, float] | None:
        """The host's answers to `call` with `payload` (a client that raises fails alone, with its error in one
        line), and the seconds spent in the host. None: this actor was restarted and is not loaded yet. The
        payload is an argument of its own so that Ray resolves it where it is an object-store reference."""
        if self.host is None:
            return None
        start = time.perf_counter()
        results = self.host.call(call.with_payload(payload))
        return results, time.perf_counter() - start

    def checkpoint_states(self, since: int | None, until: int, keep: list[int]) -> dict[int, dict[str, Any]]:
        """What a checkpoint of round `until` records of this actor's clients (the state files written since the
        checkpoint of round `since`), after deleting the files no checkpoint in `keep` or the run needs."""
        self.host.states.prune(keep, until)
        return self.host.states.changed(since, until)

    def evaluate_global(self, state, batch_size: int) -> dict[str, float] | None | bool:
        """The global model's test-set accuracies on this actor's device; False: not loaded yet."""
        return False if self.host is None else self.host.evaluate_global(state, batch_size)

    def ping(self) -> bool:
        """Alive; True once loaded."""
        return self.host is not None

    def info(self) -> dict[str, Any]:
        """Where this actor runs, what it was given, and where its tensors are (actors.json)."""
        import torch

        ctx = ray.get_runtime_context()
        placed = self.host.placement() if self.host is not None else {}
        peak = torch.cuda.max_memory_allocated() if self.device == "cuda" else 0
        return {"node_id": ctx.get_node_id(), "pid": os.getpid(), "gpu_ids": self.gpu_ids,
                "clients": list(self.client_ids), "device": self.device,
                "assigned": {k: v for k, v in ctx.get_assigned_resources().items()},
                **placed, "cuda_peak_bytes": peak}


def assign_clients(num_clients: int, num_actors: int) -> list[list[int]]:
    """Sticky round-robin assignment: client c lives on actor c mod K, for the whole run."""
    return [list(range(a, num_clients, num_actors)) for a in range(num_actors)]


def plan_round(cids: list[int], owner: dict[int, int], num_actors: int,
               costs: list[float] | None) -> dict[int, list[int]]:
    """Which actor trains which of a round's clients: {actor index: client ids}.

    Sticky (costs None, methods with client state): each client on the actor that hosts it. Balanced:
    largest first, each to the least loaded actor (ties: its own host, else the lower index); a random draw of 10 clients out
    of 100 puts 7 on one of two actors as often as not, which would leave one core idle for much of a round."""
    plan: dict[int, list[int]] = {}
    if costs is None:
        for cid in cids:
            plan.setdefault(owner[cid], []).append(cid)
        return plan
    load = [0.0] * num_actors
    for cid in sorted(cids, key=lambda c: (-costs[c], c)):
        actor_idx = min(range(num_actors), key=lambda a: (load[a], a != owner.get(cid), a))
        load[actor_idx] += costs[cid]
        plan.setdefault(actor_idx, []).append(cid)
    return plan


# A payload up to this size goes with each actor's call (inside the call's message, under Ray's own limit on
# inlined arguments) rather than once into the object store, from which each actor would then fetch it.
INLINE_PAYLOAD_BYTES = 100 * 1024


@ray.remote(num_cpus=0, max_restarts=0)
class CoordinatorActor:
    """Built in two steps, so that the client actors' processes start while the driver prepares the data:
    the constructor starts the client actors; `start` gives the coordinator the data and waits for them."""

    def __init__(self, cfg, num_actors: int, run_dir: str):
        self.cfg, self.run_dir = cfg, run_dir
        res = cfg.resources
        self.groups = assign_clients(cfg.data.num_clients, num_actors)
        self.actors = [
            ClientActor.options(num_cpus=res.cpus_per_actor, num_gpus=res.gpus_per_actor).remote(
                cfg, group, run_dir, max(1, int(res.cpus_per_actor)))
            for group in self.groups
        ]
        self.owner = {c: a for a, group in enumerate(self.groups) for c in group}
        self.loaded = [False] * len(self.actors)  # loaded once: a later load is a restart (actors.json)
        self.restarts = [0] * len(self.actors)
        self.idle_since: float | None = None  # when the last round or checkpoint ended
        import torch  # after the client actors are asked for: they start meanwhile

        torch.set_num_threads(1)
        wire.register()

    def start(self, data_box: list, snapshot: dict | None = None) -> None:
        """`data_box` = [ObjectRef]: boxed so Ray hands over the reference, which the client actors then
        resolve from the shared object store instead of receiving a copy each."""
        from orchestrator.federation import Server, client_costs, sample_clients

        self.data_box = data_box
        data = ray.get(data_box[0])
        self.server = Server(self.cfg, data)
        if snapshot is not None:
            self.server.restore(snapshot)
        self.last_checkpoint = snapshot["round"] if snapshot is not None else None  # the one resumed from
        self.costs = None if self.server.algorithm.capabilities().keeps_client_state else client_costs(data, self.cfg.train)
        # the first draw imports NumPy's random machinery (benchmarks/README.md, "Tiny clients"): here, while the
        # client actors load
        sample_clients(self.cfg.seed, self.server.round, self.server.num_clients, self.cfg.clients_per_round)
        self._await_actors(self.cfg.resources.actor_start_timeout)
        self.evaluator = self._gpu_actor()
        if self.evaluator is not None:
            self.server.global_accuracies = self._global_accuracies_on_actor

    def _gpu_actor(self) -> int | None:
        """The first client actor that computes on a GPU: the global model is evaluated there."""
        return next((idx for idx, info in enumerate(self.actor_info()) if info.get("device") == "cuda"), None)

    def _global_accuracies_on_actor(self, state) -> dict[str, float] | None:
        """Global evaluation on the GPU of a client actor; on this CPU if that actor is gone for good."""
        from orchestrator.evaluation import accuracies_on_test_sets

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
        return accuracies_on_test_sets(self.server.algorithm, state, self.server.test_sets, self.cfg.eval.batch_size)

    def _await_actors(self, timeout: float) -> None:
        """Every client actor placed, constructed and loaded (restarted, if its node was lost meanwhile), or one
        clear error: never a silent wait. The actors are loaded together, not one after another; any that died
        meanwhile is then waited for (and loaded) on its own."""
        deadline = time.monotonic() + timeout
        pings = [actor.ping.remote() for actor in self.actors]
        ray.wait(pings, num_returns=len(pings), timeout=timeout)
        loads = []
        for actor, ping in zip(self.actors, pings):
            try:
                if not ray.get(ping, timeout=0):
                    loads.append(actor.load.remote(self.data_box, self.server.round))
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

    def _gather(self, call: ClientCall) -> ClientResults:
        """`call` for each of its clients, one call per actor; an actor's clients are retried once if it died, and
        fail if it dies again."""
        from orchestrator.client_calls import ClientResults

        sent = time.perf_counter()
        pending = {self._call(a, call.to(group)): (a, group, 0)
                   for a, group in plan_round(call.client_ids, self.owner, len(self.actors), self.costs).items()}
        self.server.phases.add(f"{call.name}: dispatch", time.perf_counter() - sent)
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
                continue
            answered, host_seconds = answer
            # what a call costs beyond the host's own work: the Ray round trip, (de)serialising payload and results
            self.server.phases.add(f"{call.name}: actor host work", host_seconds)
            self.server.phases.add(f"{call.name}: actor call beyond it", time.perf_counter() - sent - host_seconds)
            gathered.add(answered)
            for cid, error in answered.errors.items():
                print(f"round {call.round + 1}: client {cid} failed in {call.name}: {error}", flush=True)
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
                    ray.get(actor.load.remote(self.data_box, self.server.round),
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
            self.write_actor_info()
        self.loaded[actor_idx] = True

    def write_actor_info(self) -> None:
        """actors.json in the run directory: each client actor's node, pid, resources, and restarts so far
        (a restarted actor's entry has its new pid)."""
        import json

        from orchestrator import storage

        storage.write_bytes_atomic(storage.join(self.run_dir, "actors.json"),
                                   json.dumps(self.actor_info(), indent=1).encode())

    def _call_clients(self, call: ClientCall) -> ClientResults:
        """`call` on the client actors, its payload put into the object store once if it is large."""
        from tasks.algorithms.base import nbytes

        with self.server.phases(f"{call.name}: payload put"):
            if nbytes(call.payload) > INLINE_PAYLOAD_BYTES:
                call = call.with_payload(ray.put(call.payload))
        return self._gather(call)

    # ------------------------------------------------------------------ driver-facing
    def set_up(self) -> None:
        from orchestrator.client_calls import CallKind, ClientCall

        if not self.server.set_up:
            contributions = self._gather(ClientCall(CallKind.SETUP, None, list(range(self.server.num_clients)), 0))
            self.server.setup([contributions.results[c] for c in sorted(contributions.results)])
        self.write_actor_info()

    def run_round(self) -> dict[str, Any]:
        if self.idle_since is not None:  # the driver asks for rounds ahead: this stays near 0 unless it lags
            self.server.phases.add("round: coordinator idle before it", time.perf_counter() - self.idle_since)
        try:
            return self.server.run_round(self._call_clients)
        finally:
            self.idle_since = time.perf_counter()

    def round(self) -> int:
        return self.server.round

    def checkpoint(self) -> str:
        """The server's snapshot and the client state files written since the previous checkpoint (the client
        states themselves are in the run directory already: orchestrator/client_store.py)."""
        try:
            with self.server.phases("checkpoint"):
                return self._checkpoint()
        finally:
            self.idle_since = time.perf_counter()

    def _checkpoint(self) -> str:
        until = self.server.round
        since = self.last_checkpoint if self.last_checkpoint is not None and self.last_checkpoint < until else None
        # a method without client state writes no state files: nothing to ask the actors
        changed = self._changed_states(since, until) if self.server.algorithm.capabilities().keeps_client_state else {}
        written = ckpt.write_checkpoint(self.run_dir, self.server.snapshot(), changed, since)
        self.last_checkpoint = until
        return written

    def _changed_states(self, since: int | None, until: int) -> dict[int, dict[str, Any]]:
        for idx in range(len(self.actors)):  # an actor restarted since the last call gets its data and state back
            self._await_ready(idx)
        keep = sorted(set(ckpt.checkpoint_rounds(self.run_dir)) | {until})
        changed: dict[int, dict[str, Any]] = {}
        for part in ray.get([a.checkpoint_states.remote(since, until, keep) for a in self.actors]):
            changed.update(part)
        return changed

    def final_state(self) -> dict[str, Any]:
        return self.server.state

    def actor_info(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Each client actor's `info`; with a timeout, an actor that does not answer in time (lost, or waiting
        for a node to restart on) is listed as unreachable instead of holding up the caller."""
        refs = [a.info.remote() for a in self.actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        out = []
        for idx, ref in enumerate(refs):
            try:
                out.append(ray.get(ref) if ref in ready else {"unreachable": True, "clients": self.groups[idx]})
            except RayActorError:
                out.append({"unreachable": True, "clients": self.groups[idx]})
        return [info | {"restarts": n} for info, n in zip(out, self.restarts)]

    def phases(self) -> dict[str, list[float]]:
        return self.server.phases.as_dict()

    def pid(self) -> int:
        return os.getpid()
