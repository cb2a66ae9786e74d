"""What each client's local work costs, from its training samples and the train settings alone: what the client
groups, the simulated clock (orchestrator/server/participation.py) and the balance of a round over client actors
(orchestrator/ray_runtime/client_pool.py) weigh."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tasks.algorithms.local_sgd import batch_sizes, local_step_count

if TYPE_CHECKING:
    from tasks.data.federated import FederatedData


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
