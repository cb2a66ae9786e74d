"""Partition kinds from outside Mooring: `data.partition.kind: my_pkg.splits:by_parity` (a `module:function`
reference, importable from the working directory or installed), or a short name an installed package gives in
the entry-point group `mooring.partitions` (tasks/registry.py, as for methods, models and datasets).

Such a function is a `PartitionFn`: it gets a `SplitRequest` (the training-set indices to split, every label,
the number of clients, the seeded generator, the `data.partition` options) and returns one array of sample
indices per client. What it returns is checked before it becomes a partition: one array per client, integer
indices among those it was given, each sample at most once (a sample it leaves out is held by no client).
Everything after is the built-in kinds' path: each client's own test split, rotation domains, the content
hash, the Parquet file, `mooring data show`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tasks.data.partition_types import PartitionError
from tasks.registry import Registry, is_reference, not_a_function_of_one

BUILT_IN_KINDS = ("iid", "dirichlet", "dirichlet_equal", "shards", "natural")


@dataclass(frozen=True)
class SplitRequest:
    """What a partition kind of one's own is asked to split."""

    indices: np.ndarray  # the training-set indices to split (int64, sorted): all, or one rotation domain's part
    labels: np.ndarray  # the label of every training sample (index it with `indices`)
    num_clients: int  # how many arrays to return
    rng: np.random.Generator  # the only randomness to use: seeded from the run seed, so the split is reproducible
    options: Any  # data.partition as configured (alpha, min_size, classes_per_client, ...)


PartitionFn = Callable[[SplitRequest], Sequence[Any]]  # -> one array of sample indices per client


def not_a_split(obj: object) -> str | None:
    """Why `obj`, found outside Mooring, cannot be a partition kind (None: it can)."""
    return not_a_function_of_one(obj, "a function (a partition kind is a function (SplitRequest) -> one index "
                                      "array per client)")


PARTITIONS: Registry[PartitionFn] = Registry("partition kind", "mooring.partitions", not_a_split,
                                             reserved=BUILT_IN_KINDS)


def outside_kind(kind: str) -> PartitionFn | None:
    """The function a kind from outside Mooring names; None for a built-in kind."""
    if kind in BUILT_IN_KINDS:
        return None
    if is_reference(kind) or kind in PARTITIONS.installed():
        return PARTITIONS.get(kind)
    return None


def split_outside(split: PartitionFn, request: SplitRequest, kind: str) -> list[np.ndarray]:
    """`split(request)`, checked: each client's indices as a sorted int64 array; a bad result raises
    PartitionError in one line naming the kind."""
    try:
        return checked_split(split(request), request)
    except SplitProblem as problem:
        raise PartitionError(f"data.partition.kind = {kind!r}: {problem}") from None


class SplitProblem(ValueError):
    """What is wrong with what a partition function returned."""


def checked_split(parts: Sequence[Any], request: SplitRequest) -> list[np.ndarray]:
    if not isinstance(parts, (Sequence, np.ndarray)) or isinstance(parts, (str, bytes)):
        raise SplitProblem(f"returned {type(parts).__name__}, not one array of sample indices per client")
    if len(parts) != request.num_clients:
        raise SplitProblem(f"returned {len(parts)} clients' samples for {request.num_clients} clients")
    arrays = [client_indices(part, client) for client, part in enumerate(parts)]
    flat = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
    unknown = np.setdiff1d(flat, request.indices)
    if len(unknown):
        raise SplitProblem(f"sample {int(unknown[0])} is not among the {len(request.indices)} samples it was "
                           "given to split")
    values, counts = np.unique(flat, return_counts=True)
    if (counts > 1).any():
        raise SplitProblem(f"sample {int(values[counts > 1][0])} is given to more than one client (or twice to one)")
    return arrays


def client_indices(part: Any, client: int) -> np.ndarray:
    array = np.asarray(part)
    if array.ndim != 1 or not (len(array) == 0 or np.issubdtype(array.dtype, np.integer)):
        raise SplitProblem(f"client {client}'s samples are not a 1-D array of integer indices")
    return np.sort(array.astype(np.int64))
