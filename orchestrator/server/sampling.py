"""Which clients a round asks, and what each one's local work costs: drawn from (run seed, round) alone, so the
same on the coordinator, in one process and in a resumed run. Used by the server's round, the simulated clock
(orchestrator/server/participation.py) and the placement of clients on actors (orchestrator/ray_runtime/)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tasks.seeds import derive_seed

if TYPE_CHECKING:
    from tasks.data.federated import FederatedData

SAMPLING_STREAM = 0x5A3


def client_costs(data: FederatedData, train) -> list[float]:
    """Each client's local work in optimizer steps (what balancing clients over actors weighs)."""
    if train.local_steps:
        return [float(train.local_steps)] * data.num_clients
    per_epoch = [(n // train.batch_size if train.drop_last else -(-n // train.batch_size)) for n in data.train_sizes()]
    return [float(max(1, steps) * train.local_epochs) for steps in per_epoch]


def sample_clients(seed: int, round_idx: int, num_clients: int, per_round: int) -> list[int]:
    """The clients of round t: uniform without replacement, from (seed, t) alone."""
    if per_round >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng(derive_seed(seed, round_idx, SAMPLING_STREAM))
    return sorted(int(c) for c in rng.choice(num_clients, per_round, replace=False))
