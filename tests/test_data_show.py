"""`mooring data show`: each client's class histogram, as text and as a PNG heat map."""
from __future__ import annotations

import subprocess
import sys

import numpy as np

from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data


def test_data_show_prints_every_client_and_saves_the_heatmap(tmp_path):
    png = tmp_path / "hist.png"
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "data", "show", "configs/default.yaml",
                          "--set", f"data.partitions_dir={tmp_path}", "--png", str(png)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    cfg = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}"])
    data = prepare_data(cfg)
    hist = data.partition.class_histogram(data.dataset.y_train, 10)
    rows = [line.split() for line in out.stdout.splitlines() if line.strip() and line.split()[0].isdigit()]
    assert len(rows) == 10
    for c, row in enumerate(rows):
        assert int(row[0]) == c and int(row[1]) == len(data.partition.train[c])
        assert np.array_equal(np.array(row[4:], dtype=int), hist[c])
    assert f"hash {data.partition_hash}" in out.stdout
    assert f"{data.partition.tally.draws} Dirichlet draws, 0 samples moved by the repair" in out.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_dataset_directory_is_one_line_exit_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "data", "show", "configs/default.yaml",
                          "--set", "data.dataset=fmnist", "--set", f"data.root={tmp_path}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: fmnist: no data in {tmp_path}/FashionMNIST/raw; expected train-images-idx3-ubyte, train-labels-idx1-ubyte, "
        "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (or set data.download: true)"]


def test_a_large_federation_lists_the_first_rows_and_summarises_the_sizes(tmp_path):
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "data", "show", "configs/default.yaml",
                          "--set", f"data.partitions_dir={tmp_path}", "--set", "data.num_clients=300",
                          "--set", "data.partition.kind=iid", "--set", "data.partition.min_size=1", "--rows", "7"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.strip() and line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == list(range(7))
    assert "… 293 more clients (--rows all lists every one)" in out.stdout
    cfg = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}", "data.num_clients=300",
                                               "data.partition.kind=iid", "data.partition.min_size=1"])
    sizes = np.array([len(t) for t in prepare_data(cfg).partition.train])
    assert (f"train samples per client: min {sizes.min()}, quartiles {np.percentile(sizes, 25):g} / "
            f"{np.median(sizes):g} / {np.percentile(sizes, 75):g}, max {sizes.max()}, total {sizes.sum()}") in out.stdout


def test_rows_must_be_a_number_or_all(tmp_path):
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "data", "show", "configs/default.yaml",
                          "--rows", "many"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--rows: 'many': expected a number of clients or 'all'" in out.stderr


def test_png_is_written_where_the_line_says_and_a_directory_is_refused(tmp_path, capsys):
    from orchestrator import cli

    sets = ["--set", f"data.partitions_dir={tmp_path / 'p'}"]
    assert cli.main(["data", "show", "configs/default.yaml", *sets, "--png", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --png {tmp_path}: a directory; give the path of a file to write the result to"]
    assert not (tmp_path / "p").exists() and not tmp_path.with_suffix(".png").exists()  # refused before the data
    bare = tmp_path / "hist"
    assert cli.main(["data", "show", "configs/default.yaml", *sets, "--png", str(bare)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"saved {bare}"
    assert bare.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not bare.with_suffix(".png").exists()
