"""scikit-learn's digits and its stratified train/test split, without importing scikit-learn: its import costs
about 1.4 CPU seconds, more than the rest of preparing the digits, in every run's start-up (benchmarks/README.md,
"Whole run"). The digits are read from the file scikit-learn ships (`sklearn/datasets/data/digits.csv.gz`, found
without importing the package); the split is a port of scikit-learn's `train_test_split(..., stratify=y,
random_state=seed)` (StratifiedShuffleSplit and `_approximate_mode`, BSD-3-Clause), so the specs' `random_state`
gives the same split: tests/test_sklearn_free.py checks it against scikit-learn's for many sizes and seeds."""
from __future__ import annotations

import gzip
import importlib.util
import math
from pathlib import Path

import numpy as np


def sklearn_data_file(name: str) -> Path:
    """A data file that scikit-learn ships, located without importing it."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("scikit-learn is not installed: it ships the digits")
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / name


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8) float64 in 0..16, labels int64), as scikit-learn's load_digits gives them."""
    with gzip.open(sklearn_data_file("digits.csv.gz"), "rt") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)


def approximate_mode(class_counts: np.ndarray, n_draws: int, rng: np.random.RandomState) -> np.ndarray:
    """How many of `n_draws` to take from each class: proportional, floored, the rest to the largest remainders,
    ties broken at random (scikit-learn's `_approximate_mode`)."""
    continuous = class_counts / class_counts.sum() * n_draws
    floored = np.floor(continuous)
    need_to_add = int(n_draws - floored.sum())
    if need_to_add > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (inds,) = np.where(remainder == value)
            add_now = min(len(inds), need_to_add)
            floored[rng.choice(inds, size=add_now, replace=False)] += 1
            need_to_add -= add_now
            if need_to_add == 0:
                break
    return floored.astype(int)


def stratified_train_test(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test) of scikit-learn's `train_test_split(np.arange(len(y)), test_size=test_fraction,
    stratify=y, random_state=seed)`, in its order. `test_fraction` in (0, 1)."""
    n_samples = len(y)
    n_test = math.ceil(test_fraction * n_samples)
    n_train = n_samples - n_test
    classes, y_indices, class_counts = np.unique(y, return_inverse=True, return_counts=True)
    if np.min(class_counts) < 2:
        raise ValueError(f"a stratified split needs 2 samples of every class; classes "
                         f"{classes[class_counts < 2].tolist()} have 1")
    if n_train < len(classes) or n_test < len(classes):
        raise ValueError(f"a stratified split of {n_samples} samples at test fraction {test_fraction} leaves "
                         f"{n_train} training and {n_test} test samples for {len(classes)} classes")
    class_indices = np.split(np.argsort(y_indices, kind="stable"), np.cumsum(class_counts)[:-1])
    rng = np.random.RandomState(seed)
    n_i = approximate_mode(class_counts, n_train, rng)
    t_i = approximate_mode(class_counts - n_i, n_test, rng)
    train: list[int] = []
    test: list[int] = []
    for i in range(len(classes)):
        permuted = class_indices[i].take(rng.permutation(class_counts[i]), mode="clip")
        train.extend(permuted[: n_i[i]])
        test.extend(permuted[n_i[i]: n_i[i] + t_i[i]])
    return rng.permutation(train), rng.permutation(test)
