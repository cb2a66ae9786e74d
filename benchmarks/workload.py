"""What a reference loop (benchmarks/bare_loop.py, benchmarks/vectorized_loop.py) trains, prepared before the clock
starts, and how it measures the global model."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tasks.algorithms.base import batch_indices, seeded_generator


@dataclass
class Workload:
    """Everything a round needs, prepared before the clock starts."""

    clients: list[tuple[torch.Tensor, torch.Tensor]]  # each client's training (x, y)
    per_round: list[list[int]]  # the sampled clients of each round
    train: Any  # the config's TrainConfig
    seed: int
    eval_every: int
    test: tuple[torch.Tensor, torch.Tensor]
    eval_batch: int  # samples a forward pass of the evaluation (eval.batch_size, as Mooring evaluates)

    def batches(self, round_idx: int, cid: int) -> list[torch.Tensor]:
        """The client's mini-batches of the round, as Mooring draws them (its generator seeded from the run seed,
        the round and the client)."""
        return batch_indices(len(self.clients[cid][1]), self.train, seeded_generator(self.seed, round_idx, cid))

    def evaluated(self, round_idx: int) -> bool:
        last = round_idx == len(self.per_round) - 1
        return bool(self.eval_every) and ((round_idx + 1) % self.eval_every == 0 or last)


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int) -> float:
    """Top-1 accuracy, forwarding `batch` samples at a time."""
    if not len(y):
        return float("nan")
    with torch.no_grad():
        correct = sum(int((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum()) for i in range(0, len(y), batch))
    return correct / len(y)
