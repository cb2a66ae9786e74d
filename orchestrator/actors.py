"""The Ray runtime: client actors (fractional GPUs, many logical clients each) and the coordinator actor.

The coordinator owns the `Server` (global state and round loop); each client actor owns a `ClientHost`.
A round puts the payload in the object store once, sends each sampled client to the actor that hosts it
(sticky assignment), collects updates as they finish, retries a client once if its actor died, and leaves
out (and counts) a client that fails twice.
"""
from __future__ import annotations

import os
import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from orchestrator import checkpoint as ckpt
from orchestrator.federation import ClientHost, RoundOutcome, Server


@ray.remote(max_restarts=-1, max_task_retries=0)
class ClientActor:
    """A Ray actor hosting logical clients. On restart after a crash it reloads its clients' state from the
    run's latest checkpoint (if any), so persistent client state survives the loss of the process."""

    def __init__(self, cfg, data, client_ids: list[int], run_dir: str, threads: int):
        import torch

        torch.set_num_threads(max(1, threads))
        gpu_ids = ray.get_gpu_ids()
        device = "cuda" if gpu_ids and torch.cuda.is_available() else "cpu"
        latest = ckpt.latest_checkpoint(run_dir)
        states = ckpt.load_client_states(latest, client_ids) if latest else {}
        self.host = ClientHost(cfg, data, client_ids, states, device=device)
        self.gpu_ids = [str(g) for g in gpu_ids]

    def update(self, payload, cid: int, round_idx: int):
        return self.host.update(payload, cid, round_idx)

    def evaluate(self, payload, cid: int, round_idx: int):
        return self.host.evaluate(payload, cid, round_idx)

    def setup_contribution(self, _payload, cid: int, _round_idx: int):
        return self.host.setup_contribution(cid)

    def client_states(self) -> dict[int, Any]:
        return self.host.client_states()

    def ping(self) -> bool:
        return True

    def info(self) -> dict[str, Any]:
        """Where this actor runs and what it was given (the cluster tests read it)."""
        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "pid": os.getpid(), "gpu_ids": self.gpu_ids,
                "clients": self.host.client_ids(), "device": str(self.host.device),
                "assigned": {k: v for k, v in ctx.get_assigned_resources().items()}}


def assign_clients(num_clients: int, num_actors: int) -> list[list[int]]:
    """Sticky round-robin assignment: client c lives on actor c mod K, for the whole run."""
    return [list(range(a, num_clients, num_actors)) for a in range(num_actors)]


@ray.remote(num_cpus=0, max_restarts=0)
class CoordinatorActor:
    def __init__(self, cfg, data_box: list, num_actors: int, run_dir: str, snapshot: dict | None = None):
        """`data_box` = [ObjectRef]: boxed so Ray hands over the reference, which the client actors then
        resolve from the shared object store instead of receiving a copy each."""
        import torch

        data_ref = data_box[0]
        data = ray.get(data_ref)
        torch.set_num_threads(1)
        self.cfg, self.run_dir = cfg, run_dir
        self.server = Server(cfg, data)
        if snapshot is not None:
            self.server.restore(snapshot)
        res = cfg.resources
        self.groups = assign_clients(data.num_clients, num_actors)
        self.actors = [
            ClientActor.options(num_cpus=res.cpus_per_actor, num_gpus=res.gpus_per_actor).remote(
                cfg, data_ref, group, run_dir, max(1, int(res.cpus_per_actor)))
            for group in self.groups
        ]
        self.owner = {c: a for a, group in enumerate(self.groups) for c in group}
        self._await_actors(cfg.resources.actor_start_timeout)

    def _await_actors(self, timeout: float) -> None:
        """Every client actor placed and constructed (restarted, if its node was lost meanwhile), or one
        clear error: never a silent wait."""
        deadline = time.monotonic() + timeout
        for idx in range(len(self.actors)):
            if not self._await_alive(idx, max(1.0, deadline - time.monotonic())):
                raise RuntimeError(f"client actors not placed within {timeout:g} s: the cluster lacks the CPUs/GPUs "
                                   f"for {len(self.actors)} actors (resources.num_actors, cpus_per_actor, "
                                   "gpus_per_actor)")

    def _gather(self, method: str, payload_ref, cids: list[int], round_idx: int) -> tuple[dict[int, Any], list[int]]:
        """Call `method` for each client on its actor; results as they finish; one retry after an actor death."""
        pending = {self._submit(method, payload_ref, c, round_idx): (c, 0) for c in cids}
        results: dict[int, Any] = {}
        failed: list[int] = []
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            cid, attempt = pending.pop(ref)
            try:
                results[cid] = ray.get(ref)
            except (RayActorError, RayTaskError) as err:
                if attempt == 0 and isinstance(err, RayActorError):
                    self._await_alive(self.owner[cid])
                    pending[self._submit(method, payload_ref, cid, round_idx)] = (cid, 1)
                else:
                    failed.append(cid)
        return results, sorted(failed)

    def _submit(self, method: str, payload_ref, cid: int, round_idx: int):
        return getattr(self.actors[self.owner[cid]], method).remote(payload_ref, cid, round_idx)

    def _await_alive(self, actor_idx: int, timeout: float = 120.0) -> bool:
        """Wait until an actor answers; Ray restarts a dead one (its constructor reloads its clients' state)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ray.get(self.actors[actor_idx].ping.remote(), timeout=max(1.0, deadline - time.monotonic()))
                return True
            except (RayActorError, GetTimeoutError):
                time.sleep(0.5)
        return False

    def _execute(self, payload, cids, round_idx) -> RoundOutcome:
        results, failed = self._gather("update", ray.put(payload), cids, round_idx)
        return RoundOutcome([results[c] for c in sorted(results)], failed)

    def _evaluate_clients(self, payload, cids, round_idx):
        results, _ = self._gather("evaluate", ray.put(payload), cids, round_idx)
        return results

    # ------------------------------------------------------------------ driver-facing
    def set_up(self) -> None:
        if not self.server.set_up:
            contributions, _ = self._gather("setup_contribution", None, list(range(self.server.num_clients)), 0)
            self.server.setup([contributions[c] for c in sorted(contributions)])

    def run_round(self) -> dict[str, Any]:
        return self.server.run_round(self._execute, self._evaluate_clients)

    def round(self) -> int:
        return self.server.round

    def checkpoint(self) -> str:
        states: dict[int, Any] = {}
        for group_states in ray.get([a.client_states.remote() for a in self.actors]):
            states.update(group_states)
        return ckpt.write_checkpoint(self.run_dir, self.server.snapshot(), states)

    def final_state(self) -> dict[str, Any]:
        return self.server.state

    def actor_info(self) -> list[dict[str, Any]]:
        return ray.get([a.info.remote() for a in self.actors])

    def actor_handles(self) -> list:
        return self.actors

    def pid(self) -> int:
        return os.getpid()
