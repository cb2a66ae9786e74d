"""The torchvision loaders read tiny files written in each dataset's real on-disk format, and never download
unless asked."""
from __future__ import annotations

import os
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
from tasks.data.datasets import DATASETS, DataFileError, DatasetNotFound

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
    raw = tmp_path / "EMNIST" / "raw"
    write_mnist_like(raw, "emnist-letters-train", "emnist-letters-test")
    for prefix, (_, labels) in (("emnist-letters-train", MNIST_TRAIN), ("emnist-letters-test", MNIST_TEST)):
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels + 1)  # the letters are labelled 1..26
    ds = load(make_opts(tmp_path, "emnist", emnist_split="letters"))
    assert_mnist_like(ds, "emnist", 26)
    write_idx(raw / "emnist-letters-train-labels-idx1-ubyte", MNIST_TRAIN[1])  # a label 0: the unused class
    with pytest.raises(DataFileError, match=r"emnist-letters-train-labels-idx1-ubyte: labels outside 1\.\.26"):
        load(make_opts(tmp_path, "emnist", emnist_split="letters"))


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
    monkeypatch.setattr("tasks.data.mnist_install.installed_dir", lambda: tmp_path / "env" / "mnist")
    with pytest.raises(DatasetNotFound, match=r"^mnist: no data in ") as caught:
        load(make_opts("data", "mnist"))
    assert str(caught.value) == (
        f"mnist: no data in {tmp_path}/data/MNIST/raw nor in {tmp_path}/env/mnist/MNIST/raw; expected "
        "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte; "
        "`make install` puts them in the latter (or set data.download: true)"
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
    """(MNIST's is the package registry's instead: tests/test_mnist.py.)"""
    def fake_download(dataset):
        write_mnist_like(Path(dataset.raw_folder))

    monkeypatch.setattr(tvd.FashionMNIST, "download", fake_download)
    assert_mnist_like(load(make_opts(tmp_path, "fmnist", download=True)), "fmnist", 10)


def test_a_failed_download_is_one_line(tmp_path, monkeypatch):
    def offline(dataset):
        raise URLError("no network")

    monkeypatch.setattr(tvd.CIFAR10, "download", offline)
    with pytest.raises(DatasetNotFound, match=r"^cifar10: could not download into ") as caught:
        load(make_opts(tmp_path, "cifar10", download=True))
    assert str(caught.value) == (
        f"cifar10: could not download into {tmp_path}/cifar-10-batches-py: <urlopen error no network>"
    )


# --------------------------------------------------------------------------- malformed and crafted files
def one_line_error(opts) -> str:
    with pytest.raises(DataFileError) as caught:
        load(opts)
    message = str(caught.value)
    assert "\n" not in message
    return message


def idx_bad_magic(path: Path) -> None:
    path.write_bytes(struct.pack(">I", 0x0000080B) + path.read_bytes()[4:])


def idx_truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-10])


def idx_trailing(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\0")


def idx_empty(path: Path) -> None:
    path.write_bytes(b"")


@pytest.mark.parametrize(("file", "damage", "problem"), [
    ("train-images-idx3-ubyte", idx_bad_magic,
     "bad magic number 0x0000080b; an idx file of unsigned bytes with 3 dimensions starts with 0x00000803"),
    ("t10k-images-idx3-ubyte", idx_truncated, "truncated: 2358 bytes, but its header (3 x 28 x 28 values) needs 2368"),
    ("t10k-labels-idx1-ubyte", idx_trailing, "wrong size: 12 bytes, but its header (3 values) needs 11"),
    ("train-labels-idx1-ubyte", idx_empty, "truncated: 0 bytes, less than an idx header of 8"),
])
def test_a_malformed_idx_file_is_one_line_naming_it(tmp_path, file, damage, problem):
    raw = tmp_path / "MNIST" / "raw"
    write_mnist_like(raw)
    damage(raw / file)
    assert one_line_error(make_opts(tmp_path, "mnist")) == f"{raw / file}: {problem}"


@pytest.mark.parametrize(("name", "folder", "prefix"), [("fmnist", "FashionMNIST", "train"),
                                                        ("emnist", "EMNIST", "emnist-balanced-train")])
def test_the_other_idx_sets_check_their_files_too(tmp_path, name, folder, prefix):
    raw = tmp_path / folder / "raw"
    write_mnist_like(raw, *(("train", "t10k") if name == "fmnist" else ("emnist-balanced-train", "emnist-balanced-test")))
    idx_bad_magic(raw / f"{prefix}-images-idx3-ubyte")
    assert one_line_error(make_opts(tmp_path, name)).startswith(f"{raw / prefix}-images-idx3-ubyte: bad magic number ")


def test_idx_labels_must_match_the_images_and_the_classes(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    write_mnist_like(raw)
    write_idx(raw / "t10k-labels-idx1-ubyte", np.array([7, 2], dtype=np.uint8))
    assert one_line_error(make_opts(tmp_path, "mnist")) == (
        f"{raw}/t10k-labels-idx1-ubyte: 2 labels for the 3 images of {raw}/t10k-images-idx3-ubyte")
    write_idx(raw / "t10k-labels-idx1-ubyte", np.array([7, 2, 10], dtype=np.uint8))
    assert one_line_error(make_opts(tmp_path, "mnist")) == (
        f"{raw}/t10k-labels-idx1-ubyte: labels outside 0..9 (found 2..10)")


class WritesMarker:
    """A pickle that, if unpickled by pickle.load, runs `call(*args)` and so creates the marker file."""

    def __init__(self, call, args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


@pytest.mark.parametrize("how", ["os.system", "builtins.open"])
def test_a_crafted_cifar_pickle_is_refused_without_running_it(tmp_path, how):
    write_cifar10(tmp_path)
    marker = tmp_path / "MARKER"
    payload = WritesMarker(os.system, (f"touch {marker}",)) if how == "os.system" else WritesMarker(open, (str(marker), "w"))
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(pickle.dumps({"data": payload, "labels": [0]}, protocol=2))
    message = one_line_error(make_opts(tmp_path, "cifar10"))
    assert message.startswith(f"{batch}: it refers to ") and message.endswith(
        ", which a CIFAR batch never holds; refused, not run")
    assert not marker.exists()


def cifar_batch(images: np.ndarray, labels: list) -> dict:
    return {"batch_label": "training batch 1 of 5", "data": images, "labels": labels, "filenames": ["a.png"]}


@pytest.mark.parametrize(("content", "problem"), [
    (b"", "not a readable CIFAR batch pickle (EOFError: Ran out of input)"),
    (pickle.dumps(cifar_batch(cifar_images(0, 2), [1, 2]), protocol=2)[:300],
     "not a readable CIFAR batch pickle (UnpicklingError: "),
    (b"garbage, not a pickle", "not a readable CIFAR batch pickle (UnpicklingError: "),
    (pickle.dumps([1, 2, 3], protocol=2), "not a CIFAR batch: expected a dict with 'data' and 'labels'"),
    (pickle.dumps(cifar_batch(cifar_images(0, 2)[:, :100], [1, 2]), protocol=2),
     "'data' is uint8 (2, 100); expected uint8 rows of 3072 bytes"),
    (pickle.dumps(cifar_batch(cifar_images(0, 2), [1]), protocol=2), "'labels' must be 2 integers, one per image"),
    (pickle.dumps(cifar_batch(cifar_images(0, 2), [1, 10]), protocol=2), "'labels' outside 0..9"),
])
def test_a_malformed_cifar_batch_is_one_line_naming_it(tmp_path, content, problem):
    write_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    batch.write_bytes(content)
    assert one_line_error(make_opts(tmp_path, "cifar10")).startswith(f"{batch}: {problem}")


def test_a_batch_of_the_official_size_must_have_the_official_md5(tmp_path):
    write_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "test_batch"
    write_pickle(batch, cifar_batch(np.zeros((10_000, 3072), np.uint8), [0] * 10_000))
    assert one_line_error(make_opts(tmp_path, "cifar10")) == (
        f"{batch}: holds the official 10000 images but its MD5 is not the official {tvd.CIFAR10.test_list[0][1]}; "
        "the file is damaged or altered: download it again")


def test_cifar_batches_pickled_by_python_3_read_the_same(tmp_path):
    """Protocol 5 pickles numpy arrays through another numpy function than protocol 2 does."""
    _, _, test_images, test_labels = write_cifar10(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    (folder / "test_batch").write_bytes(pickle.dumps(cifar_batch(test_images, test_labels), protocol=5))
    np.testing.assert_array_equal(load(make_opts(tmp_path, "cifar10")).x_test,
                                  test_images.reshape(-1, 3, 32, 32) / np.float32(255))


def python2_cpickle(images: np.ndarray, labels: list[int]) -> bytes:
    """{'data': images, 'labels': labels} as Python 2's cPickle wrote CIFAR's batches (protocol 2, numpy 1):
    byte strings as str, numpy's functions under numpy.core."""
    def string(text: bytes) -> bytes:
        return b"U" + bytes([len(text)]) + text if len(text) < 256 else b"T" + struct.pack("<I", len(text)) + text

    def integer(n: int) -> bytes:
        return b"K" + bytes([n]) if n < 256 else b"M" + struct.pack("<H", n)

    dtype = (b"cnumpy\ndtype\n" + string(b"u1") + integer(0) + integer(1) + b"\x87R(" + integer(3) + string(b"|")
             + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xff" + integer(0) + b"tb")
    array = (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n" + integer(0) + b"\x85" + string(b"b")
             + b"\x87R(" + integer(1) + integer(len(images)) + integer(images.shape[1]) + b"\x86" + dtype + b"\x89"
             + string(images.tobytes()) + b"tb")
    return (b"\x80\x02}(" + string(b"data") + array + string(b"labels") + b"](" + b"".join(map(integer, labels))
            + b"eu.")


def test_cifar_batches_as_python_2_pickled_them_read_the_same(tmp_path):
    _, _, test_images, test_labels = write_cifar10(tmp_path)
    content = python2_cpickle(test_images, test_labels)
    np.testing.assert_array_equal(pickle.loads(content, encoding="latin1")["data"], test_images)  # the format holds
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(content)
    ds = load(make_opts(tmp_path, "cifar10"))
    np.testing.assert_array_equal(ds.x_test, test_images.reshape(-1, 3, 32, 32) / np.float32(255))
    assert ds.y_test.tolist() == test_labels


def test_mooring_data_show_on_a_malformed_data_root_is_one_line_and_exit_2(tmp_path, capsys):
    from orchestrator.cli import main

    raw = tmp_path / "MNIST" / "raw"
    write_mnist_like(raw)
    idx_truncated(raw / "train-images-idx3-ubyte")
    args = ["data", "show", "configs/default.yaml", "--set", "data.dataset=mnist", "--set", f"data.root={tmp_path}",
            "--set", f"data.partitions_dir={tmp_path / 'partitions'}"]
    assert main(args) == 2
    assert capsys.readouterr().err == (
        f"error: {raw}/train-images-idx3-ubyte: truncated: 3926 bytes, but its header (5 x 28 x 28 values) needs 3936\n")
