"""The coordinator: it owns the `Server` (global state and round loop) and a `ClientPool`
(orchestrator/server/coordinator_clients.py): the client actors (orchestrator/ray_runtime/client_pool.py), each
owning a `ClientHost`, or one host in the coordinator's own process. A plain class, so that a run whose clients
all train in one process runs it in the driver's, without Ray (orchestrator/driver/local_coordinator.py); Ray's
actor of it, which alone has client actors, is orchestrator/ray_runtime/actors.py's `CoordinatorActor`.
"""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from orchestrator.clients.run_host import write_actor_info
from orchestrator.io import checkpoint as ckpt
from orchestrator.process_memory import keep_freed_memory

if TYPE_CHECKING:
    from orchestrator.server.coordinator_clients import ClientPool

# orchestrator.server.federation (and torch with it) is imported where it is used, not here: a worker imports this
# module before it constructs an actor, and the coordinator starts the client actors first thing, so their
# processes start (and import torch) while it imports torch itself.


class Coordinator:
    """Built in two steps, so that the client actors' processes start while the driver prepares the data: the
    constructor starts the client actors; `start` gives the coordinator the data and waits for them. With
    `clients_here` (resources.clients_on: orchestrator/ray_runtime/placement.py) there are no client actors: `start` hosts
    every client in this process: a Ray actor's (`CoordinatorActor`, launched with one client actor's CPUs), or,
    where the run needs no Ray at all, the driver's own (orchestrator/driver/local_coordinator.py)."""

    def __init__(self, cfg, num_actors: int, run_dir: str, clients_here: bool = False):
        self.cfg, self.run_dir = cfg, run_dir
        self.pool: ClientPool | None = None if clients_here else self.client_actors(num_actors)
        self.idle_since: float | None = None  # when the last round or checkpoint ended
        self.failure: Exception | None = None  # see run_rounds
        self.round_to_warm_up = None  # the data of the server's throwaway round, until it runs: see run_rounds
        import torch  # after the client actors are asked for: they start meanwhile

        torch.set_num_threads(1)
        keep_freed_memory()  # where the clients train here, and for the global model's evaluation
        if clients_here:  # launched before the data is there: what `start` will need, imported meanwhile
            import orchestrator.server.federation  # noqa: F401

    def client_actors(self, num_actors: int) -> ClientPool:
        """`num_actors` client actors, started now; only Ray's coordinator (orchestrator/ray_runtime/actors.py)
        has them."""
        raise NotImplementedError("client actors run on Ray: orchestrator/ray_runtime/actors.py's CoordinatorActor")

    def data_of(self, data_box: list):
        """The run's data: in the driver's process the box holds it (the Ray actor fetches its reference)."""
        return data_box[0]

    def start(self, data_box: list, snapshot: dict | None = None) -> None:
        """`data_box` = [the data], or on Ray [ObjectRef]: boxed so Ray hands over the reference, which the client
        actors then resolve from the shared object store instead of receiving a copy each."""
        from orchestrator.clients.client_groups import ClientGroups
        from orchestrator.clients.client_work import client_work
        from orchestrator.server.coordinator_clients import CoordinatorClients
        from orchestrator.server.federation import Server
        from orchestrator.server.sampling import sample_clients
        from tasks.algorithms.engines import run_engine

        data = self.data_of(data_box)
        self.server = Server(self.cfg, data)
        if snapshot is not None:
            self.server.restore(snapshot)
        self.last_checkpoint = snapshot["round"] if snapshot is not None else None  # the one resumed from
        # the first draw imports NumPy's random machinery (benchmarks/README.md, "Tiny clients"): here, while the
        # client actors load
        sample_clients(self.cfg.seed, self.server.round, self.server.num_clients, self.cfg.clients_per_round)
        if self.pool is None:
            self.pool = CoordinatorClients(self.cfg, data, self.run_dir, self.server.round, self.server.phases)
            self.round_to_warm_up = data  # the server's half of round 1's first-use costs: see run_rounds
            return
        keeps_state = self.server.algorithm.capabilities().keeps_client_state
        engine = run_engine(self.cfg, self.server.algorithm)
        self.pool.start(data_box, self.server, ClientGroups.of_run(self.cfg, data, engine, self.server.algorithm),
                        None if keeps_state else client_work(data, self.cfg.train))

    # ------------------------------------------------------------------ driver-facing
    def set_up(self) -> None:
        from orchestrator.clients.client_calls import CallKind, ClientCall

        if not self.server.set_up:
            contributions = self.pool.call(ClientCall(CallKind.SETUP, None, list(range(self.server.num_clients)), 0))
            self.server.setup([contributions.results[c] for c in sorted(contributions.results)])
        write_actor_info(self.run_dir, self.pool.info())

    def run_rounds(self, count: int, more: bool = False) -> list[tuple[dict[str, Any], float]]:
        """`count` rounds in one call (the driver asks for as many as take a few tens of milliseconds:
        orchestrator/driver/round_loop.py): each one's metrics and seconds. `more`: the driver will ask for the
        round after them (so each round's end may begin the next one's training: `Server.run_round`). A failed
        round is recorded, so that the calls the driver queued behind it raise it too: it left the server
        half-changed (its round counted, its state perhaps aggregated), and no later round or checkpoint may build
        on that. A round that fails after others of the call ended is raised by the next call (or checkpoint), so
        that the driver first records those.

        A call of no rounds is the driver's last step before round 1 (orchestrator/driver/run_start.py): where the
        clients train here, the server's throwaway round (`warm_up_round`) runs then, just before round 1, rather
        than when the data came: the coordinator then waited idle for MLflow's run to start, and met round 1 cold
        (benchmarks/README.md, "Fixed cost")."""
        self.raise_failure()
        if count == 0:
            self.warm_up_server()
        ended = []
        for i in range(count):
            start = time.perf_counter()
            try:
                metrics = self.run_round(more or i < count - 1)
            except Exception as e:
                self.failure = e
                if not ended:
                    raise
                break
            ended.append((metrics, time.perf_counter() - start))
        return ended

    def warm_up_server(self) -> None:
        """The server's throwaway round, once, where the clients train in this process."""
        if self.round_to_warm_up is not None:
            data, self.round_to_warm_up = self.round_to_warm_up, None
            warm_up_round(self.cfg, data)

    def raise_failure(self) -> None:
        """The failure of a round whose call returned the rounds before it: nothing may follow it (a checkpoint
        would record the failed round's half-changed state)."""
        if self.failure is not None:
            raise self.failure

    def run_round(self, next_too: bool = False) -> dict[str, Any]:
        """One round; `next_too`: the round after it will be run too, so its clients, if they train on client
        actors, may start while this round ends."""
        if self.idle_since is not None:  # the driver asks for rounds ahead: this stays near 0 unless it lags
            self.server.phases.add("round: coordinator idle before it", time.perf_counter() - self.idle_since)
        try:
            return self.server.run_round(self.pool.call, self.pool.begin if next_too else None)
        finally:
            self.idle_since = time.perf_counter()

    def round(self) -> int:
        return self.server.round

    def checkpoint(self) -> str:
        """The server's snapshot and the client state files written since the previous checkpoint (the client
        states themselves are in the run directory already: orchestrator/clients/client_store.py)."""
        self.raise_failure()
        try:
            with self.server.phases("checkpoint"):
                return self._checkpoint()
        finally:
            self.idle_since = time.perf_counter()

    def _checkpoint(self) -> str:
        until = self.server.round
        since = self.last_checkpoint if self.last_checkpoint is not None and self.last_checkpoint < until else None
        changed = {}
        # a method without client state writes no state files: nothing to ask the client hosts
        if self.server.algorithm.capabilities().keeps_client_state:
            changed = self.pool.changed_states(since, until, sorted(set(ckpt.checkpoint_rounds(self.run_dir)) | {until}))
        written = ckpt.write_checkpoint(self.run_dir, self.server.snapshot(), changed, since)
        self.last_checkpoint = until
        return written

    def final_state(self) -> dict[str, Any]:
        return self.server.state

    def actor_info(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Where the clients train (`ClientPool.info`): each client actor, or the coordinator; after a round begun
        ahead and never asked for has left the actors (it would hold up their answer)."""
        self.server.settle_started()
        return self.pool.info(timeout)

    def phases(self) -> dict[str, list[float]]:
        return self.server.phases.as_dict()

    def pid(self) -> int:
        return os.getpid()


def warm_up_round(cfg, data) -> bool:
    """One throwaway round of a Server of its own (sampling, aggregation, the round's metrics; no evaluation) on a
    host of its own for the round's clients, one local step each: the server's first-use costs, paid just before
    round 1, where the coordinator trains the clients itself (`Coordinator.run_rounds`). Random states
    put back as `warm_up` does; whether it ran (a method with a set-up exchange is left out)."""
    if not cfg.resources.warm_up:
        return False
    from orchestrator.clients.client_host import ClientHost
    from orchestrator.clients.warm_up import preserved_random_state, with_local_steps
    from orchestrator.server.federation import Server, in_process_calls
    from orchestrator.server.sampling import sample_clients

    short = with_local_steps(cfg, 1, rounds=2).model_copy(  # round 1 of 2, evaluated every 3: no evaluation
        update={"eval": cfg.eval.model_copy(update={"every": 3})})
    with preserved_random_state():
        try:
            server = Server(short, data)
            if not server.set_up:
                return False
            clients = sample_clients(cfg.seed, 0, data.num_clients, cfg.clients_per_round)
            server.run_round(in_process_calls(ClientHost(short, data, clients)))
        except Exception:  # noqa: BLE001 - an optimisation, as warm_up's
            return False
    return True
