"""A client's number of local steps and their momentum-weighted count (tasks/algorithms/local_sgd.py), against
the batches the engines draw and torch's own SGD."""
from __future__ import annotations

import pytest
import torch

from tasks.algorithms.base import TrainSettings, batch_indices
from tasks.algorithms.local_sgd import batch_sizes, effective_steps, local_step_count


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("epochs, steps", [(1, None), (2, None), (1, 3)])
def test_local_step_count_and_batch_sizes_are_those_of_the_batches_drawn(drop_last, epochs, steps):
    train = TrainSettings(batch_size=8, local_epochs=epochs, local_steps=steps, drop_last=drop_last)
    for n in range(0, 30):
        drawn = batch_indices(n, train, torch.Generator().manual_seed(n))
        assert local_step_count(n, train) == len(drawn), n
        assert batch_sizes(n, train) == [len(b) for b in drawn], n


@pytest.mark.parametrize("momentum, steps", [(0.0, 3), (0.9, 1), (0.9, 4), (0.5, 7)])
def test_effective_steps_is_how_far_torchs_momentum_sgd_moves_on_a_constant_gradient(momentum, steps):
    """On ⟨v, w⟩ every gradient is v, so K steps of torch's SGD move w by η·‖a‖₁·v."""
    v, lr = torch.tensor([1.0, -2.0]), 0.1
    w = torch.zeros(2, requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=lr, momentum=momentum)
    for _ in range(steps):
        optimizer.zero_grad()
        (w * v).sum().backward()
        optimizer.step()
    assert torch.allclose(-w.detach(), lr * effective_steps(steps, momentum) * v, rtol=1e-6)


def test_effective_steps_by_hand():
    # K = 2, β = 0.5: the first gradient weighs 1 + β, the second 1
    assert effective_steps(2, 0.5) == pytest.approx(2.5)
    assert effective_steps(5, 0.0) == 5.0
