"""The coordinator as a Ray actor (orchestrator/server/coordinator.py's `Coordinator`) with its client actors,
launched by the driver on its own node (orchestrator/driver/run_start.py)."""
from __future__ import annotations

import ray

from orchestrator.ray_runtime import wire
from orchestrator.server.coordinator import Coordinator


@ray.remote(num_cpus=0, max_restarts=0)
class CoordinatorActor(Coordinator):
    """The coordinator in a Ray worker process of its own, where the client actors' results come back through
    Mooring's serializers (orchestrator/ray_runtime/wire.py)."""

    def __init__(self, cfg, num_actors: int, run_dir: str, clients_here: bool = False):
        super().__init__(cfg, num_actors, run_dir, clients_here)
        wire.register()

    def client_actors(self, num_actors: int):
        from orchestrator.ray_runtime.client_pool import ActorPool

        return ActorPool(self.cfg, num_actors, self.run_dir)

    def data_of(self, data_box: list):
        """The data from Ray's object store (the box holds its reference)."""
        return ray.get(data_box[0])
