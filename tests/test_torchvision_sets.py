"""The torchvision loaders read tiny files written in each dataset's real on-disk format, and never download
unless asked."""
from __future__ import annotations

import pickle
import re
import struct
from pathlib import Path
from types import SimpleNamespace
from urllib.error import URLError

import numpy as np
import pytest
import torchvision.datasets as tvd

import tasks.data.torchvision_sets  # noqa: F401  (registers the loaders)
from tasks.data.datasets import DATASETS, DatasetNotFound

IDX_UBYTE = 0x08  # idx type code of unsigned bytes
TORCHVISION_CLASSES = [tvd.MNIST, tvd.FashionMNIST, tvd.EMNIST, tvd.CIFAR10, tvd.CIFAR100]


def make_opts(root: Path | str, dataset: str, download: bool = False, emnist_split: str = "balanced"):
    return SimpleNamespace(dataset=dataset, root=str(root), download=download, emnist_split=emnist_split)


def load(opts):
    return DATASETS.get(opts.dataset)(opts)


@pytest.fixture
def download_calls(monkeypatch) -> list[str]:
    """Replaces every torchvision download with a recorder, so a test can assert that none happened."""
    calls: list[str] = []
    for cls in TORCHVISION_CLASSES:
        monkeypatch.setattr(cls, "download", lambda self: calls.append(type(self).__name__))
    return calls


# ------------------------------------------------------------------------------------------ idx files
def write_idx(path: Path, array: np.ndarray) -> None:
    """IDX format: magic (0, 0, type, ndim), each dimension as big-endian uint32, then the values."""
    header = struct.pack(">BBBB", 0, 0, IDX_UBYTE, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def idx_split(seed: int, count: int, labels: list[int]) -> tuple[np.ndarray, np.ndarray]:
    images = np.random.default_rng(seed).integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
    return images, np.array(labels, dtype=np.uint8)


MNIST_TRAIN = idx_split(0, 5, [5, 0, 4, 1, 9])
MNIST_TEST = idx_split(1, 3, [7, 2, 1])


def write_mnist_like(raw: Path, prefix_train: str = "train", prefix_test: str = "t10k") -> None:
    for prefix, (images, labels) in ((prefix_train, MNIST_TRAIN), (prefix_test, MNIST_TEST)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)


def test_idx_writer_uses_the_mnist_magic_numbers(tmp_path):
    write_mnist_like(tmp_path)
    assert (tmp_path / "train-images-idx3-ubyte").read_bytes()[:16] == struct.pack(">4I", 2051, 5, 28, 28)
    assert (tmp_path / "train-labels-idx1-ubyte").read_bytes()[:8] == struct.pack(">2I", 2049, 5)


def assert_mnist_like(ds, name: str, num_classes: int, label_offset: int = 0) -> None:
    assert ds.name == name and ds.num_classes == num_classes
    assert ds.x_train.shape == (5, 1, 28, 28) and ds.x_test.shape == (3, 1, 28, 28)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64 and ds.y_test.dtype == np.int64
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
    np.testing.assert_array_equal(ds.x_train[:, 0], MNIST_TRAIN[0] / np.float32(255))
    np.testing.assert_array_equal(ds.x_test[:, 0], MNIST_TEST[0] / np.float32(255))
    assert ds.x_train[2, 0, 3, 17] == np.float32(MNIST_TRAIN[0][2, 3, 17] / 255)
    assert ds.y_train.tolist() == [y - label_offset for y in MNIST_TRAIN[1].tolist()]
    assert ds.y_test.tolist() == [y - label_offset for y in MNIST_TEST[1].tolist()]


@pytest.mark.parametrize(("name", "folder"), [("mnist", "MNIST"), ("fmnist", "FashionMNIST")])
def test_mnist_and_fashion_mnist_read_the_raw_idx_files(tmp_path, download_calls, name, folder):
    write_mnist_like(tmp_path / folder / "raw")
    assert_mnist_like(load(make_opts(tmp_path, name)), name, 10)
    assert download_calls == []


def test_emnist_reads_the_chosen_split(tmp_path, download_calls):
    write_mnist_like(tmp_path / "EMNIST" / "raw", "emnist-balanced-train", "emnist-balanced-test")
    assert_mnist_like(load(make_opts(tmp_path, "emnist")), "emnist", 47)
    assert download_calls == []


def test_emnist_letters_shift_labels_to_start_at_zero(tmp_path):
    write_mnist_like(tmp_path / "EMNIST" / "raw", "emnist-letters-train", "emnist-letters-test")
    ds = load(make_opts(tmp_path, "emnist", emnist_split="letters"))
    assert_mnist_like(ds, "emnist", 26, label_offset=1)


def test_emnist_rejects_an_unknown_split(tmp_path):
    with pytest.raises(ValueError, match="emnist: unknown split 'bogus'; allowed: balanced, byclass"):
        load(make_opts(tmp_path, "emnist", emnist_split="bogus"))


# -------------------------------------------------------------------------------------- CIFAR pickles
def cifar_images(seed: int, count: int) -> np.ndarray:
    """Rows of 3072 bytes: the red, green and blue 32×32 planes, as in CIFAR's `data` arrays."""
    return np.random.default_rng(seed).integers(0, 256, size=(count, 3072), dtype=np.uint8)


def write_pickle(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj, protocol=2))


def write_cifar10(root: Path) -> tuple[np.ndarray, list[int], np.ndarray, list[int]]:
    folder = root / "cifar-10-batches-py"
    train_images, train_labels = cifar_images(10, 10), [3, 8, 8, 0, 6, 6, 1, 6, 3, 1]
    test_images, test_labels = cifar_images(11, 3), [9, 2, 4]
    for i in range(5):
        rows = slice(2 * i, 2 * i + 2)
        batch = {"batch_label": f"training batch {i + 1} of 5", "data": train_images[rows],
                 "labels": train_labels[rows], "filenames": ["a.png", "b.png"]}
        write_pickle(folder / f"data_batch_{i + 1}", batch)
    write_pickle(folder / "test_batch", {"batch_label": "testing batch 1 of 1", "data": test_images,
                                         "labels": test_labels, "filenames": ["c.png", "d.png", "e.png"]})
    write_pickle(folder / "batches.meta", {"label_names": [f"class{i}" for i in range(10)], "num_vis": 3072})
    return train_images, train_labels, test_images, test_labels


def write_cifar100(root: Path) -> tuple[np.ndarray, list[int], np.ndarray, list[int]]:
    folder = root / "cifar-100-python"
    train_images, train_labels = cifar_images(20, 4), [19, 29, 0, 99]
    test_images, test_labels = cifar_images(21, 2), [49, 33]
    write_pickle(folder / "train", {"data": train_images, "fine_labels": train_labels,
                                    "coarse_labels": [11, 15, 4, 19], "filenames": list("abcd")})
    write_pickle(folder / "test", {"data": test_images, "fine_labels": test_labels,
                                   "coarse_labels": [10, 17], "filenames": list("ef")})
    write_pickle(folder / "meta", {"fine_label_names": [f"f{i}" for i in range(100)],
                                   "coarse_label_names": [f"c{i}" for i in range(20)]})
    return train_images, train_labels, test_images, test_labels


@pytest.mark.parametrize(("name", "writer", "num_classes"), [("cifar10", write_cifar10, 10),
                                                              ("cifar100", write_cifar100, 100)])
def test_cifar_reads_the_pickled_batches(tmp_path, download_calls, name, writer, num_classes):
    train_images, train_labels, test_images, test_labels = writer(tmp_path)
    ds = load(make_opts(tmp_path, name))
    assert ds.name == name and ds.num_classes == num_classes
    assert ds.x_train.shape == (len(train_labels), 3, 32, 32) and ds.x_test.shape == (len(test_labels), 3, 32, 32)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64 and ds.y_test.dtype == np.int64
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
    assert ds.y_train.tolist() == train_labels and ds.y_test.tolist() == test_labels
    # channel 1 (green), row 2, column 7 of the second image is byte 1024 + 2 * 32 + 7 of its row
    assert ds.x_train[1, 1, 2, 7] == np.float32(train_images[1, 1024 + 2 * 32 + 7] / 255)
    np.testing.assert_array_equal(ds.x_test, test_images.reshape(-1, 3, 32, 32) / np.float32(255))
    assert download_calls == []


@pytest.mark.parametrize(("name", "writer", "cls"), [("cifar10", write_cifar10, tvd.CIFAR10),
                                                      ("cifar100", write_cifar100, tvd.CIFAR100)])
def test_cifar_matches_torchvision_once_its_md5_check_is_bypassed(tmp_path, monkeypatch, name, writer, cls):
    writer(tmp_path)
    monkeypatch.setattr(tvd.cifar, "check_integrity", lambda *args, **kwargs: True)
    ds = load(make_opts(tmp_path, name))
    for train, x, y in ((True, ds.x_train, ds.y_train), (False, ds.x_test, ds.y_test)):
        reference = cls(str(tmp_path), train=train)
        np.testing.assert_array_equal(x, reference.data.transpose(0, 3, 1, 2) / np.float32(255))  # NHWC → NCHW
        assert y.tolist() == reference.targets


# ------------------------------------------------------------------------------- missing data, download
def test_missing_mnist_names_the_absolute_directory_and_files(tmp_path, monkeypatch, download_calls):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetNotFound, match=r"^mnist: no data in ") as caught:
        load(make_opts("data", "mnist"))
    assert str(caught.value) == (
        f"mnist: no data in {tmp_path}/data/MNIST/raw; expected train-images-idx3-ubyte, "
        "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (or set data.download: true)"
    )
    assert download_calls == []
    assert not (tmp_path / "data").exists()


def test_missing_cifar10_names_the_absolute_directory_and_files(tmp_path, download_calls):
    with pytest.raises(DatasetNotFound, match=r"^cifar10: no data in ") as caught:
        load(make_opts(tmp_path, "cifar10"))
    assert str(caught.value) == (
        f"cifar10: no data in {tmp_path}/cifar-10-batches-py; expected data_batch_1, data_batch_2, "
        "data_batch_3, data_batch_4, data_batch_5, test_batch, batches.meta (or set data.download: true)"
    )
    assert download_calls == []


def test_missing_files_are_listed_when_a_directory_is_incomplete(tmp_path):
    write_cifar100(tmp_path)
    (tmp_path / "cifar-100-python" / "meta").unlink()
    with pytest.raises(DatasetNotFound, match=r"cifar100: no data in .*/cifar-100-python; expected meta \("):
        load(make_opts(tmp_path, "cifar100"))


@pytest.mark.parametrize(("name", "directory"), [("fmnist", "FashionMNIST/raw"), ("emnist", "EMNIST/raw"),
                                                 ("cifar100", "cifar-100-python")])
def test_every_loader_checks_before_torchvision(tmp_path, download_calls, name, directory):
    with pytest.raises(DatasetNotFound, match=re.escape(f"{name}: no data in {tmp_path}/{directory}; expected ")):
        load(make_opts(tmp_path, name))
    assert download_calls == []


def test_download_true_lets_torchvision_download(tmp_path, monkeypatch):
    def fake_download(dataset):
        write_mnist_like(Path(dataset.raw_folder))

    monkeypatch.setattr(tvd.MNIST, "download", fake_download)
    assert_mnist_like(load(make_opts(tmp_path, "mnist", download=True)), "mnist", 10)


def test_a_failed_download_is_one_line(tmp_path, monkeypatch):
    def offline(dataset):
        raise URLError("no network")

    monkeypatch.setattr(tvd.CIFAR10, "download", offline)
    with pytest.raises(DatasetNotFound, match=r"^cifar10: could not download into ") as caught:
        load(make_opts(tmp_path, "cifar10", download=True))
    assert str(caught.value) == (
        f"cifar10: could not download into {tmp_path}/cifar-10-batches-py: <urlopen error no network>"
    )
