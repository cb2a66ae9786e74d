"""FedProc's loss and prototypes (docs/methods/fedproc.md) by hand on tiny tensors."""
from __future__ import annotations

import math

import pytest
import torch

from tasks.algorithms.base import ClientUpdate
from tasks.algorithms.fedproc import ce_weight, fedproc_loss
from tests.method_fixtures import tiny_method


def test_the_loss_by_hand():
    """One sample, h = (1, 0), y = 0; prototypes (2, 0) and (0, 3): cosines 1 and 0. τ = 0.5, share w = 0.25;
    logits (0, ln 3): CE = ln 4; L_PC = −log(e² / (e² + e⁰))."""
    h, y = torch.tensor([[1.0, 0.0]]), torch.tensor([0])
    prototypes = torch.tensor([[2.0, 0.0], [0.0, 3.0]])
    logits = torch.tensor([[0.0, math.log(3.0)]])
    expected = 0.25 * math.log(4.0) + 0.75 * -math.log(math.e**2 / (math.e**2 + 1.0))
    assert float(fedproc_loss(logits, y, h, prototypes, 0.25, 0.5)) == pytest.approx(expected, rel=1e-6)


def test_the_cross_entropy_share_grows_to_one():
    assert [ce_weight(t, 4) for t in range(4)] == [0.25, 0.5, 0.75, 1.0]


def test_the_server_pools_the_class_means_and_round_zero_is_cross_entropy_alone():
    method = tiny_method("fedproc")
    state = method.init_global()
    assert method.local_objective(method.payload(state, 0), None, {}, _ctx(0)).inputs["ce_share"] == 1.0
    updates = [ClientUpdate(0, 2, tensors=state["model"], stats={"sums": torch.tensor([[2.0, 4.0], [0.0, 0.0]]),
                                                                 "counts": torch.tensor([2.0, 0.0])}),
               ClientUpdate(1, 1, tensors=state["model"], stats={"sums": torch.tensor([[4.0, 2.0], [0.0, 0.0]]),
                                                                 "counts": torch.tensor([1.0, 0.0])})]
    new = method.aggregate(state, updates, 0)
    assert torch.allclose(new["prototypes"], torch.tensor([[2.0, 2.0], [0.0, 0.0]]))  # class 1: none, kept
    assert method.local_objective(method.payload(new, 1), None, {}, _ctx(1)).inputs["ce_share"] == pytest.approx(0.1)


def _ctx(round_idx: int):
    from tasks.algorithms import RoundContext, TrainSettings

    return RoundContext(round_idx, 0, TrainSettings(rounds=20), torch.Generator())
