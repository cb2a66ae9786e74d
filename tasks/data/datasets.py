"""Datasets as in-memory arrays: images float32 in NCHW (text: int64 token ids, (N, L)), labels int64, one
official train/test split, and for naturally split data each sample's owner (tasks/data/natural.py).

`digits` (scikit-learn's load_digits: 1,797 real 8×8 handwritten digits, shipped with scikit-learn, read from its file
without importing it: tasks/data/sklearn_free.py) is the
embedded default, `digits_28` the same images upsampled to 28×28; `synthetic` makes small class-conditional images for fast tests; the torchvision sets
(tasks/data/torchvision_sets.py) read a local directory and never download unless asked.
"""
from __future__ import annotations

import numpy as np

# what a loader returns and the registry it joins, in a module the loaders import (tasks/data/dataset_types.py);
# a loader written outside Mooring imports them here, as it always has
from tasks.data.dataset_types import (  # noqa: F401  (re-exported)
    DATASETS,
    ArrayDataset,
    DataFileError,
    DatasetNotFound,
    not_a_loader,
)
from tasks.registry import PluginError


def stratified_split(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted indices of a stratified train/test split (scikit-learn's, so the specs' `random_state` matches)."""
    from tasks.data.sklearn_free import stratified_train_test

    if test_fraction == 0:
        idx = np.arange(len(y))
        return idx, idx[:0]
    train, test = stratified_train_test(y, test_fraction, seed)
    return np.sort(train), np.sort(test)


def _split(name: str, x: np.ndarray, y: np.ndarray, num_classes: int, test_fraction: float, seed: int) -> ArrayDataset:
    train, test = stratified_split(y, test_fraction, seed)
    return ArrayDataset(name, x[train], y[train], x[test], y[test], num_classes)


@DATASETS.register("digits")
def load_digits_dataset(opts) -> ArrayDataset:
    from tasks.data.sklearn_free import load_digits_arrays

    images, y = load_digits_arrays()
    x = (images / 16.0).astype(np.float32)[:, None, :, :]
    return _split("digits", x, y, 10, opts.test_fraction, opts.split_seed)


@DATASETS.register("digits_28")
def load_digits_28(opts) -> ArrayDataset:
    """The digits upsampled bilinearly to 28×28, the shape of MNIST and EMNIST: real images for the 28×28 models
    (acar_cnn) that ship with scikit-learn, so nothing is downloaded. The same samples and split as `digits`."""
    import torch
    import torch.nn.functional as F

    ds = load_digits_dataset(opts)

    def upsampled(x: np.ndarray) -> np.ndarray:
        return F.interpolate(torch.from_numpy(x), size=(28, 28), mode="bilinear", align_corners=False).numpy()

    return ArrayDataset("digits_28", upsampled(ds.x_train), ds.y_train, upsampled(ds.x_test), ds.y_test,
                        ds.num_classes)


SYNTHETIC_BLOCK = 65536


@DATASETS.register("synthetic")
def load_synthetic(opts) -> ArrayDataset:
    """Class-conditional Gaussian images: each class has a fixed random mean image plus pixel noise.

    Made in blocks of samples, each written straight to its train or test place: millions of samples never
    hold float64 noise for all of them nor a second copy for the split (the values are those of one draw)."""
    s = opts.synthetic
    rng = np.random.default_rng(s.seed)
    shape = (s.channels, s.size, s.size)
    means = rng.normal(0.0, 1.0, size=(s.num_classes, *shape)).astype(np.float32)
    y = np.arange(s.num_samples, dtype=np.int64) % s.num_classes
    rng.shuffle(y)
    train, test = stratified_split(y, opts.test_fraction, opts.split_seed)
    is_train = np.zeros(len(y), dtype=bool)
    is_train[train] = True
    place = np.empty(len(y), dtype=np.int64)  # each sample's row in x_train or x_test
    place[train], place[test] = np.arange(len(train)), np.arange(len(test))
    x_train = np.empty((len(train), *shape), dtype=np.float32)
    x_test = np.empty((len(test), *shape), dtype=np.float32)
    for start in range(0, s.num_samples, SYNTHETIC_BLOCK):
        block = slice(start, start + SYNTHETIC_BLOCK)
        x = means[y[block]] + s.noise * rng.normal(size=(len(y[block]), *shape)).astype(np.float32)
        to_train = is_train[block]
        x_train[place[block][to_train]] = x[to_train]
        x_test[place[block][~to_train]] = x[~to_train]
    return ArrayDataset("synthetic", x_train, y[train], x_test, y[test], s.num_classes)


def load_dataset(opts) -> ArrayDataset:
    """Load the dataset a DataConfig names, zero-padded by `pad` pixels per side. Normalisation comes
    later (`normalize_images`), after any rotation, so rotated corners stay background."""
    import tasks.data.leaf  # noqa: F401  (registers leaf_femnist, leaf_shakespeare, leaf_sent140)
    import tasks.data.shakespeare  # noqa: F401  (registers shakespeare)
    import tasks.data.torchvision_sets  # noqa: F401  (registers mnist, fmnist, emnist, cifar10, cifar100)

    ds = DATASETS.get(opts.dataset)(opts)
    if not isinstance(ds, ArrayDataset):
        raise PluginError(f"the loader of dataset {opts.dataset!r} returned {type(ds).__name__}, not an ArrayDataset")
    if opts.pad and ds.x_train.ndim == 4:
        p = opts.pad
        ds.x_train = np.pad(ds.x_train, ((0, 0), (0, 0), (p, p), (p, p)))
        ds.x_test = np.pad(ds.x_test, ((0, 0), (0, 0), (p, p), (p, p)))
    return ds


def normalize_images(x: np.ndarray, mode: str) -> np.ndarray:
    """`center` maps [0, 1] to [-1, 1] ((x − 0.5)/0.5, docs/methods/fedsa.md §11)."""
    return (x - 0.5) / 0.5 if mode == "center" else x
