"""FedFM's NIID-2 (dominant classes) and NIID-3 (missing classes) splits, by hand on tiny labels, and through
the partition path a config takes (tasks/data/paper_splits.py)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from orchestrator.experiment.config import load_config
from tasks.data.datasets import load_dataset
from tasks.data.paper_splits import dominant_classes, missing_classes
from tasks.data.partition import make_partition
from tasks.data.partition_kinds import SplitRequest

LABELS = np.repeat(np.arange(10), 50)  # 50 samples of each of 10 classes


def request(num_clients: int = 10, classes_per_client: int = 2, labels=LABELS) -> SplitRequest:
    return SplitRequest(np.arange(len(labels)), labels, num_clients, np.random.default_rng(0),
                        SimpleNamespace(classes_per_client=classes_per_client))


def histograms(parts, labels=LABELS) -> np.ndarray:
    return np.stack([np.bincount(labels[p], minlength=labels.max() + 1) for p in parts])


def test_dominant_classes_give_46_percent_of_class_i_to_client_i():
    counts = histograms(dominant_classes(request()))
    expected = np.full((10, 10), 3) + np.diag(np.full(10, 20))  # 0.46 · 50 = 23 on the diagonal, 0.06 · 50 = 3 off it
    assert (counts == expected).all()


def test_with_more_classes_than_clients_each_client_dominates_a_block():
    labels = np.repeat(np.arange(20), 50)
    counts = histograms(dominant_classes(request(num_clients=2, labels=labels)), labels)
    # 2 clients: client 0 dominates classes 0..9 (46 % = 23 of each), client 1 classes 10..19; the rest goes over
    assert counts[0, :10].tolist() == [23] * 10 and counts[0, 10:].tolist() == [27] * 10
    assert counts[1, 10:].tolist() == [23] * 10


@pytest.mark.parametrize("missing", [1, 2, 3, 5, 7])
def test_missing_classes_hold_the_cyclic_classes_in_equal_parts(missing):
    m = 10 - missing
    counts = histograms(missing_classes(request(classes_per_client=m)))
    for i in range(10):
        held = {(i + j) % 10 for j in range(m)}
        assert {c for c in range(10) if counts[i, c]} == held
        assert (counts[i, sorted(held)] == 50 // m).all()  # each class split among its m holders


def test_a_config_names_the_splits_and_gets_them():
    cfg = load_config("configs/default.yaml",
                      ["data.partition.kind=tasks.data.paper_splits:missing_classes",
                       "data.partition.classes_per_client=3", "data.num_clients=10", "data.client_test_fraction=0"])
    y = load_dataset(cfg.data.model_copy(update={"split_seed": cfg.split_seed})).y_train
    part = make_partition(y, cfg.data, cfg.seed)
    for i, idx in enumerate(part.train):
        assert set(np.unique(y[idx]).tolist()) == {i % 10, (i + 1) % 10, (i + 2) % 10}
