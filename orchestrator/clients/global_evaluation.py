"""The global model's accuracy on the test sets, on the device that evaluates it: a client host's (its own or the
server's test sets: orchestrator/clients/client_host.py) or the coordinator's (orchestrator/server/federation.py)."""
from __future__ import annotations

import torch

from tasks.algorithms.base import State, count_correct
from tasks.algorithms.server_side import ServerAlgorithm


def accuracies_on_test_sets(algorithm: ServerAlgorithm, state: State,
                            test_sets: dict[str, tuple[torch.Tensor, torch.Tensor]], batch_size: int,
                            device: torch.device | str = "cpu") -> dict[str, float] | None:
    """{test set: accuracy} of the global model in `state`, evaluated on `device`; None without a global model."""
    model = algorithm.global_model(state)
    if model is None:
        return None
    model.to(device)
    return {name: count_correct(model, x, y, batch_size) / max(1, len(y)) for name, (x, y) in test_sets.items()}
