"""Which clients a round asks: drawn from (run seed, round) alone, so the same on the coordinator, in one process and
in a resumed run (what each one's local work costs: orchestrator/clients/client_work.py)."""
from __future__ import annotations

import numpy as np

from tasks.seeds import derive_seed

SAMPLING_STREAM = 0x5A3


def sample_clients(seed: int, round_idx: int, num_clients: int, per_round: int) -> list[int]:
    """The clients of round t: uniform without replacement, from (seed, t) alone."""
    if per_round >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng(derive_seed(seed, round_idx, SAMPLING_STREAM))
    return sorted(int(c) for c in rng.choice(num_clients, per_round, replace=False))
