"""MNIST, Fashion-MNIST, EMNIST, CIFAR-10 and CIFAR-100 from a local directory in torchvision's layout.

Each loader reads the official train/test split from `opts.root` (the directory torchvision's `root` argument
names) and returns an ArrayDataset: images float32 in NCHW scaled to [0, 1], labels int64. Nothing is
downloaded unless `opts.download` is true; missing files raise DatasetNotFound with one line naming the
directory searched and the files expected, before torchvision is asked for anything.

The MNIST family is read by torchvision's own classes. CIFAR batches are read here with torchvision's file
names and pickle format, because torchvision's CIFAR classes accept only files whose MD5 matches the
official archive; they are still what downloads CIFAR when `opts.download` is true.
"""
from __future__ import annotations

import os
import pickle
from collections.abc import Callable

import numpy as np

from tasks.data.datasets import DATASETS, ArrayDataset, DatasetNotFound

# torchvision's EMNIST `letters` labels run 1..26 (0 is an unused "N/A" class); they are shifted to 0..25.
EMNIST_NUM_CLASSES = {"balanced": 47, "byclass": 62, "bymerge": 47, "digits": 10, "letters": 26, "mnist": 10}


def _absolute_root(opts) -> str:
    return os.path.abspath(os.path.expanduser(opts.root))


def _require_files(name: str, directory: str, files: list[str]) -> None:
    missing = [f for f in files if not os.path.isfile(os.path.join(directory, f))]
    if missing:
        raise DatasetNotFound(
            f"{name}: no data in {directory}; expected {', '.join(missing)} (or set data.download: true)"
        )


def _download(name: str, directory: str, fetch: Callable[[], object]) -> None:
    """Run a torchvision constructor with download=True; its (multi-line) errors become one line."""
    try:
        fetch()
    except (RuntimeError, OSError) as err:  # URLError is an OSError
        reason = " ".join(str(err).split())
        raise DatasetNotFound(f"{name}: could not download into {directory}: {reason}") from err


def _unit_float(images: np.ndarray) -> np.ndarray:
    """uint8 pixels → float32 in [0, 1]."""
    scaled = images.astype(np.float32)
    scaled /= 255.0
    return scaled


# ------------------------------------------------------------------------------------------ MNIST family
def _load_idx_dataset(
    name: str,
    opts,
    make_split: Callable[[bool, bool], object],
    directory: str,
    files: list[str],
    num_classes: int,
    label_offset: int = 0,
) -> ArrayDataset:
    """Read both splits with `make_split(train, download)`, a torchvision MNIST-family constructor."""
    if opts.download:
        _download(name, directory, lambda: make_split(True, True))
    else:
        _require_files(name, directory, files)
    arrays = []
    for train in (True, False):
        split = make_split(train, False)
        arrays.append(_unit_float(split.data.numpy()[:, None, :, :]))  # (N, 28, 28) → (N, 1, 28, 28)
        arrays.append(split.targets.numpy().astype(np.int64) - label_offset)
    return ArrayDataset(name, *arrays, num_classes)


def _load_mnist_like(name: str, opts, dataset_class) -> ArrayDataset:
    """MNIST and Fashion-MNIST: <root>/<ClassName>/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte."""
    root = _absolute_root(opts)
    directory = os.path.join(root, dataset_class.__name__, "raw")
    files = [filename.removesuffix(".gz") for filename, _md5 in dataset_class.resources]

    def make_split(train: bool, download: bool):
        return dataset_class(root, train=train, download=download)

    return _load_idx_dataset(name, opts, make_split, directory, files, num_classes=10)


@DATASETS.register("mnist")
def load_mnist(opts) -> ArrayDataset:
    from torchvision.datasets import MNIST

    return _load_mnist_like("mnist", opts, MNIST)


@DATASETS.register("fmnist")
def load_fashion_mnist(opts) -> ArrayDataset:
    from torchvision.datasets import FashionMNIST

    return _load_mnist_like("fmnist", opts, FashionMNIST)


@DATASETS.register("emnist")
def load_emnist(opts) -> ArrayDataset:
    """EMNIST split `opts.emnist_split`: <root>/EMNIST/raw/emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte.

    Images are kept as torchvision returns them (EMNIST's files store each image transposed).
    """
    from torchvision.datasets import EMNIST

    split_name = opts.emnist_split
    if split_name not in EMNIST_NUM_CLASSES:
        raise ValueError(f"emnist: unknown split {split_name!r}; allowed: {', '.join(EMNIST_NUM_CLASSES)}")
    root = _absolute_root(opts)
    directory = os.path.join(root, "EMNIST", "raw")
    files = [
        f"emnist-{split_name}-{part}-{kind}-ubyte"
        for part in ("train", "test")
        for kind in ("images-idx3", "labels-idx1")
    ]

    def make_split(train: bool, download: bool):
        return EMNIST(root, split=split_name, train=train, download=download)

    label_offset = 1 if split_name == "letters" else 0
    return _load_idx_dataset(
        "emnist", opts, make_split, directory, files, EMNIST_NUM_CLASSES[split_name], label_offset
    )


# ------------------------------------------------------------------------------------------------ CIFAR
def _read_cifar_batches(directory: str, files: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 3, 32, 32) in [0, 1] and int64 labels from CIFAR's pickled batches, as torchvision reads them."""
    images, labels = [], []
    for filename in files:
        with open(os.path.join(directory, filename), "rb") as f:
            batch = pickle.load(f, encoding="latin1")  # the batches were pickled by Python 2
        images.append(batch["data"])
        labels.extend(batch["labels"] if "labels" in batch else batch["fine_labels"])
    # Each row of `data` holds 1024 red, then 1024 green, then 1024 blue values, each plane row-major.
    pixels = np.vstack(images).reshape(-1, 3, 32, 32)
    return _unit_float(pixels), np.asarray(labels, dtype=np.int64)


def _load_cifar(name: str, opts, dataset_class, num_classes: int) -> ArrayDataset:
    root = _absolute_root(opts)
    directory = os.path.join(root, dataset_class.base_folder)
    train_files = [filename for filename, _md5 in dataset_class.train_list]
    test_files = [filename for filename, _md5 in dataset_class.test_list]
    if opts.download:
        _download(name, directory, lambda: dataset_class(root, train=True, download=True))
    else:
        _require_files(name, directory, [*train_files, *test_files, dataset_class.meta["filename"]])
    x_train, y_train = _read_cifar_batches(directory, train_files)
    x_test, y_test = _read_cifar_batches(directory, test_files)
    return ArrayDataset(name, x_train, y_train, x_test, y_test, num_classes)


@DATASETS.register("cifar10")
def load_cifar10(opts) -> ArrayDataset:
    """CIFAR-10: <root>/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}."""
    from torchvision.datasets import CIFAR10

    return _load_cifar("cifar10", opts, CIFAR10, num_classes=10)


@DATASETS.register("cifar100")
def load_cifar100(opts) -> ArrayDataset:
    """CIFAR-100 with its 100 fine labels: <root>/cifar-100-python/{train, test, meta}."""
    from torchvision.datasets import CIFAR100

    return _load_cifar("cifar100", opts, CIFAR100, num_classes=100)
