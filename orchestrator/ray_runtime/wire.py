"""How tensors travel between Mooring's processes over Ray: as NumPy arrays.

Ray pickles a torch tensor with torch's own `__reduce_ex__`, which runs `torch.save` into a byte string for
every storage and `torch.load` on the way back, a fixed cost per tensor that dominated a small client's round
(measured in benchmarks/README.md, "Tiny clients"). A CPU tensor sent as a NumPy array goes through pickle 5's
out-of-band buffers instead (one copy each way). Only plain, contiguous CPU tensors that NumPy can hold take this path; any other (a subclass such as
nn.Parameter, CUDA, sparse, bfloat16, requiring grad, non-contiguous) is pickled as before (named tensors lose
their names).
The bytes, dtype and shape are the same either way, so a run's numbers are too.
"""
from __future__ import annotations

from functools import cache
from typing import Any


def register() -> None:
    """Use this encoding for every tensor this process sends over Ray (each process registers its own: the
    receiving side needs nothing but this module). Call after `ray.init` or inside an actor."""
    import ray
    import torch

    ray.util.register_serializer(torch.Tensor, serializer=encode, deserializer=decode)


def encode(tensor) -> Any:
    """A NumPy array where the tensor is plain, else the tensor's own reduction (rebuild, arguments)."""
    import torch

    if (tensor.device.type == "cpu" and tensor.layout == torch.strided and not tensor.requires_grad
            and tensor.dtype in numpy_dtypes() and tensor.is_contiguous() and not tensor.is_conj()
            and not tensor.is_neg()):
        return tensor.numpy()
    rebuild, args = tensor.__reduce_ex__(2)
    return rebuild, args


def decode(encoded):
    """The tensor `encode` sent: a NumPy array is copied out of Ray's (read-only) buffer into its own memory."""
    import numpy as np
    import torch

    if isinstance(encoded, np.ndarray):
        return torch.from_numpy(encoded.copy())
    rebuild, args = encoded
    return rebuild(*args)


@cache
def numpy_dtypes() -> frozenset:
    """The tensor dtypes NumPy holds as they are."""
    import torch

    return frozenset({torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16,
                      torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128})
