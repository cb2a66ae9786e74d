"""The client actors' life: started at once with the resources each asks Ray for (their processes import torch
while the coordinator prepares), placed and loaded with their clients, waited for and loaded again after Ray
restarts one, and each restart counted and recorded in actors.json."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from orchestrator.ray_runtime.client_placement import assign_clients


class ClientActors:
    """A run's client actors by index (`handles`), the clients each hosts, and their restarts."""

    def __init__(self, cfg, num_actors: int, run_dir: str):
        from orchestrator.ray_runtime.client_actor import ClientActor

        self.run_dir = run_dir
        res = cfg.resources
        self.hosted = assign_clients(cfg.data.num_clients, num_actors)  # until `host` knows the client groups
        self.handles = [
            ClientActor.options(num_cpus=res.cpus_per_actor, num_gpus=res.gpus_per_actor).remote(
                cfg, hosted, run_dir, max(1, int(res.cpus_per_actor)))
            for hosted in self.hosted
        ]
        self.loaded = [False] * len(self.handles)  # loaded once: a later load is a restart (actors.json)
        self.restarts = [0] * len(self.handles)
        self.data_box: list | None = None
        self.round: Callable[[], int] = lambda: 0

    def host(self, data_box: list, hosted: list[list[int]], current_round: Callable[[], int]) -> None:
        """What an actor is loaded with, now and after a restart: `data_box` = [ObjectRef of the FederatedData],
        its clients (`hosted`) and the round it resumes at (`current_round()`, read at the load)."""
        self.data_box, self.hosted, self.round = data_box, hosted, current_round

    def await_all(self, timeout: float) -> None:
        """Every client actor placed, constructed and loaded (restarted, if its node was lost meanwhile), or one
        clear error: never a silent wait. The actors are loaded together, not one after another; any that died
        meanwhile is then waited for (and loaded) on its own."""
        deadline = time.monotonic() + timeout
        pings = [actor.ping.remote() for actor in self.handles]
        ray.wait(pings, num_returns=len(pings), timeout=timeout)
        loads = []
        for idx, (actor, ping) in enumerate(zip(self.handles, pings)):
            try:
                if not ray.get(ping, timeout=0):
                    loads.append(actor.load.remote(self.data_box, self.round(), self.hosted[idx]))
            except (RayActorError, GetTimeoutError):
                pass  # not up yet, or died: `await_ready` below waits for it
        for load in loads:
            try:
                ray.get(load)
            except RayActorError:
                pass
        for idx in range(len(self.handles)):
            if not self.await_ready(idx, max(1.0, deadline - time.monotonic())):
                raise RuntimeError(f"client actors not placed within {timeout:g} s: the cluster lacks the CPUs/GPUs "
                                   f"for {len(self.handles)} actors (resources.num_actors, cpus_per_actor, "
                                   "gpus_per_actor)")
        self.loaded = [True] * len(self.handles)

    def await_ready(self, actor_idx: int, timeout: float = 120.0) -> bool:
        """Wait until an actor answers (Ray restarts a dead one), and load it if it is new."""
        deadline = time.monotonic() + timeout
        actor = self.handles[actor_idx]
        while time.monotonic() < deadline:
            try:
                if not ray.get(actor.ping.remote(), timeout=max(1.0, deadline - time.monotonic())):
                    ray.get(actor.load.remote(self.data_box, self.round(), self.hosted[actor_idx]),
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

    def info(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Each client actor's `info`; with a timeout, an actor that does not answer in time (lost, or waiting
        for a node to restart on) is listed as unreachable instead of holding up the caller."""
        refs = [a.info.remote() for a in self.handles]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        out = []
        for idx, ref in enumerate(refs):
            try:
                out.append(ray.get(ref) if ref in ready else {"unreachable": True, "clients": self.hosted[idx]})
            except RayActorError:
                out.append({"unreachable": True, "clients": self.hosted[idx]})
        return [info | {"restarts": n} for info, n in zip(out, self.restarts)]
