"""tasks/models/reuse.py: a reused working model moved and loaded as `.to(device)` and `load_state_dict` would
leave it, copying straight into its tensors where the state matches them, and through `load_state_dict` (its
errors included) where it does not."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tasks.models.reuse import prepared


class Counted(nn.Module):
    """A small model with a parameter-free layer, buffers (BatchNorm's running statistics and its counter) and a
    non-persistent buffer; it counts the calls that take the slow paths."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 3, 2)
        self.norm = nn.BatchNorm1d(3)
        self.act = nn.ReLU()
        self.head = nn.Linear(3, 2)
        self.register_buffer("scratch", torch.zeros(1), persistent=False)
        self.slow_loads = 0
        self.moves = 0

    def load_state_dict(self, *args, **kwargs):
        self.slow_loads += 1
        return super().load_state_dict(*args, **kwargs)

    def _apply(self, fn, *args, **kwargs):
        self.moves += 1
        return super()._apply(fn, *args, **kwargs)


def random_state(model: nn.Module, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: (torch.randint(0, 9, v.shape, generator=g) if v.dtype == torch.long else torch.randn(v.shape, generator=g))
            for k, v in model.state_dict().items()}


def test_a_matching_state_is_copied_into_the_model_s_own_tensors_bitwise_as_load_state_dict_would():
    model, reference = Counted(), Counted()
    params = {k: id(v) for k, v in model.state_dict(keep_vars=True).items()}
    for seed in (1, 2):
        state = random_state(model, seed)
        prepared(model, state)
        reference.load_state_dict(state)
        for (key, got), want in zip(model.state_dict().items(), reference.state_dict().values()):
            assert got.dtype == want.dtype and torch.equal(got, want), key
    assert model.slow_loads == 0  # both loads took the copy
    assert {k: id(v) for k, v in model.state_dict(keep_vars=True).items()} == params  # the same tensor objects
    assert model.state_dict()["norm.num_batches_tracked"].dtype == torch.long


def test_a_parameter_assigned_after_a_load_is_the_one_the_next_load_fills():
    model = Counted()
    prepared(model, random_state(model, 1))
    model.head.weight = nn.Parameter(torch.zeros(2, 3))  # a method assigns a new parameter
    state = random_state(model, 2)
    prepared(model, state)
    assert torch.equal(model.head.weight.detach(), state["head.weight"])
    assert model.slow_loads == 0


def test_a_state_that_does_not_match_goes_through_load_state_dict_and_its_errors():
    model = Counted()
    state = random_state(model, 1)
    missing = {k: v for k, v in state.items() if k != "head.bias"}
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "head.bias"'):
        prepared(model, missing)
    resized = {**state, "head.weight": torch.zeros(2, 4)}
    with pytest.raises(RuntimeError, match=r"size mismatch for head.weight"):
        prepared(model, resized)
    reordered = dict(reversed(list(state.items())))  # load_state_dict takes keys in any order: so does this
    prepared(model, reordered)
    assert model.slow_loads == 3
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())


def test_a_model_that_loads_in_its_own_way_is_always_loaded_by_load_state_dict():
    class DoublingLinear(nn.Linear):
        def _load_from_state_dict(self, state_dict, prefix, *args):
            super()._load_from_state_dict(state_dict, prefix, *args)
            with torch.no_grad():
                self.bias.mul_(2)  # what a loader of its own might do

    model, shared = Counted(), Counted()
    model.head = DoublingLinear(3, 2)
    shared.tail = shared.head  # one module under two names: state_dict lists it twice
    state = random_state(model, 1)
    prepared(model, state)
    assert model.slow_loads == 1 and torch.equal(model.head.bias.detach(), 2 * state["head.bias"])
    prepared(shared, random_state(shared, 1))
    assert shared.slow_loads == 1


def test_a_model_on_the_cpu_is_not_moved_there_again_and_any_other_device_is_always_moved_to():
    model = Counted()
    prepared(model, device="cpu")
    prepared(model, device=torch.device("cpu"))
    assert model.moves == 0
    prepared(model, device="meta")  # another device: moved, every time
    prepared(model, device="meta")
    assert model.moves == 2 and model.head.weight.device.type == "meta" and model.scratch.device.type == "meta"
