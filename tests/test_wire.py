"""Tensors between processes as NumPy arrays (orchestrator/ray_runtime/wire.py): the same bytes, dtype, shape and flags."""
from __future__ import annotations

import pickle

import pytest
import torch

from orchestrator.ray_runtime import wire


def round_trip(tensor: torch.Tensor) -> torch.Tensor:
    """encode → pickle (as Ray's serializer would) → decode."""
    return wire.decode(pickle.loads(pickle.dumps(wire.encode(tensor), protocol=5)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64, torch.uint8, torch.bool])
def test_a_plain_tensor_comes_back_bitwise_in_memory_of_its_own(dtype):
    source = (torch.randn(5, 7, generator=torch.Generator().manual_seed(0)) * 100).to(dtype)
    encoded = wire.encode(source)
    back = round_trip(source)
    assert type(encoded).__module__ == "numpy"  # the fast path, not torch.save
    assert back.dtype == dtype and back.shape == source.shape and back.stride() == source.stride()
    assert torch.equal(back.view(torch.uint8), source.view(torch.uint8))
    back.add_(1) if dtype != torch.bool else back.logical_not_()  # writable, and not the sender's memory
    assert not torch.equal(back, source)


def test_a_zero_dim_tensor_stays_zero_dim():
    assert round_trip(torch.tensor(3.5)).shape == ()


@pytest.mark.parametrize("make", [
    lambda: torch.randn(4, 6).t(),                                   # non-contiguous: strides kept
    lambda: torch.randn(3, 3).to(torch.bfloat16),                     # no NumPy dtype
    lambda: torch.randn(3, requires_grad=True),                       # requires grad
    lambda: torch.randn(8, 8).to_sparse(),                            # sparse
])
def test_any_other_tensor_is_pickled_as_torch_pickles_it(make):
    source = make()
    encoded = wire.encode(source)
    back = round_trip(source)
    assert not type(encoded).__module__ == "numpy"
    assert back.dtype == source.dtype and back.layout == source.layout and back.requires_grad == source.requires_grad
    assert back.stride() == source.stride() if source.layout == torch.strided else True
    assert torch.equal(back.detach().to_dense(), source.detach().to_dense())


@pytest.mark.ray
def test_a_registered_process_sends_tensors_through_ray_unchanged(ray_session):
    import ray

    state = {"w": torch.randn(64, 128), "b": torch.zeros(128), "steps": torch.tensor(7), "t": torch.randn(3, 2).t()}
    wire.register()
    try:
        back = ray.get(ray.put(state))
    finally:
        ray.util.deregister_serializer(torch.Tensor)
    assert back.keys() == state.keys()
    for key, tensor in state.items():
        assert back[key].dtype == tensor.dtype and back[key].stride() == tensor.stride()
        assert torch.equal(back[key], tensor)
