"""Which clients a round asks, and what each one's local work costs: drawn from (run seed, round) alone, so the
same on the coordinator, in one process and in a resumed run. Used by the server's round, the simulated clock
(orchestrator/server/participation.py) and the placement of clients on actors (orchestrator/ray_runtime/)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tasks.algorithms.local_sgd import batch_sizes, local_step_count
from tasks.seeds import derive_seed

if TYPE_CHECKING:
    from tasks.data.federated import FederatedData

SAMPLING_STREAM = 0x5A3


def client_costs(data: FederatedData, train) -> list[float]:
    """Each client's local work in optimizer steps (what the client groups and the simulated clock weigh); a client
    without training samples counts as one of a sample."""
    return [float(local_step_count(max(1, n), train)) for n in data.train_sizes()]


# A training step of b samples costs about as much as STEP_FIXED_FORWARDS + STEP_SAMPLE_FORWARDS·b forward passes of
# one sample: acar_cnn on one core takes 0.8 ms + 0.3 ms a sample a step against 0.17 ms a sample forward, so a
# client of 3 samples costs a seventh of a client of 48 in steps of 16, not a third (benchmarks/README.md, "Where
# the model is the cost").
STEP_FIXED_FORWARDS = 5.0
STEP_SAMPLE_FORWARDS = 2.0


def client_work(data: FederatedData, train) -> list[float]:
    """Each client's local work in forward passes of one sample: what balances a round's groups and the global
    evaluation's shares over client actors."""
    return [sum(STEP_FIXED_FORWARDS + STEP_SAMPLE_FORWARDS * b for b in batch_sizes(n, train))
            for n in data.train_sizes()]


def sample_clients(seed: int, round_idx: int, num_clients: int, per_round: int) -> list[int]:
    """The clients of round t: uniform without replacement, from (seed, t) alone."""
    if per_round >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng(derive_seed(seed, round_idx, SAMPLING_STREAM))
    return sorted(int(c) for c in rng.choice(num_clients, per_round, replace=False))
