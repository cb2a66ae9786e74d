"""The validation split (data.validation_fraction, eval.split): held out of the clients' training samples, drawn
from the seed, disjoint from the training and test data; a run evaluated on it reads no test data and names its
metrics val_*. The sweep's use of it (no trial reads the test sets) is tested in tests/test_sweep.py."""
from __future__ import annotations

import numpy as np
import pytest

from orchestrator.experiment.config import ConfigError, load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import run_in_process
from tasks.data.partition import Partition, hold_out_validation

TINY = ["train.rounds=2", "data.num_clients=4", "data.partition.alpha=1.0", "data.partition.min_size=5",
        "train.local_epochs=1", "eval.diagnostics=false"]


def test_validation_is_held_out_of_training_and_drawn_from_the_seed():
    train = [np.arange(0, 10), np.arange(10, 13), np.arange(13, 14)]
    part = Partition(train, [np.arange(100, 103)] * 3, np.zeros(3, dtype=np.int64))
    kept, validation = hold_out_validation(part, 0.3, seed=7)
    assert [len(v) for v in validation] == [3, 1, 0]  # round(10 · 0.3), round(0.9), and one sample kept to train
    for before, after, held in zip(train, kept.train, validation):
        assert not set(after) & set(held)
        assert sorted([*after, *held]) == list(before)
        assert list(after) == sorted(after)  # the training samples keep their order
    again = hold_out_validation(part, 0.3, seed=7)[1]
    other = hold_out_validation(part, 0.3, seed=8)[1]
    assert all(np.array_equal(a, b) for a, b in zip(validation, again))
    assert not np.array_equal(validation[0], other[0])
    assert hold_out_validation(part, 0.0, seed=7)[0] is part


def test_a_run_on_the_validation_split_reads_no_test_data(tmp_path):
    common = TINY + [f"data.partitions_dir={tmp_path / 'p'}", "data.validation_fraction=0.25",
                     "algorithm.name=fedavg"]
    on_test = prepare_data(load_config("configs/default.yaml", common))
    on_validation = prepare_data(load_config("configs/default.yaml", common + ["eval.split=validation"]))
    rows = {c: set(on_test.partition.train[c]) for c in range(4)}
    own_test = {c: set(on_test.partition.test[c]) for c in range(4)}
    for c in range(4):
        held = set(on_validation.validation[c])
        assert held and not held & rows[c] and not held & own_test[c]
        assert np.array_equal(on_test.validation[c], on_validation.validation[c])  # the same split either way
        data = on_validation.client_data(c, with_global_test=True)
        x_train = on_validation.dataset.x_train
        assert data.x_test.shape[0] == len(held)
        assert np.allclose(data.x_test.numpy(), x_train[on_validation.validation[c]])
    everyone = np.concatenate(on_validation.validation)
    (x, y), = on_validation.test_sets().values()
    assert np.array_equal(y.numpy(), on_validation.dataset.y_train[everyone])
    assert len(y) != len(on_validation.dataset.y_test)


def test_metrics_on_the_validation_split_are_named_val(tmp_path):
    common = TINY + [f"data.partitions_dir={tmp_path / 'p'}", "data.validation_fraction=0.25",
                     "algorithm.name=fedproto"]  # a personalized method: its clients' own splits too
    cfg = load_config("configs/default.yaml", common + ["eval.split=validation"])
    history = run_in_process(cfg, prepare_data(cfg))
    keys = set(history[-1])
    assert {"val_personalized_accuracy", "val_personalized_clients"} <= keys
    assert not {k for k in keys if k.startswith(("accuracy", "personalized_"))}
    test_cfg = load_config("configs/default.yaml", common)
    on_test = run_in_process(test_cfg, prepare_data(test_cfg))
    assert [m["train_loss"] for m in on_test] == [m["train_loss"] for m in history]  # the same training
    assert on_test[-1]["personalized_accuracy"] != history[-1]["val_personalized_accuracy"]


def test_evaluating_on_a_split_that_does_not_exist_is_refused():
    with pytest.raises(ConfigError, match="eval.split = 'validation': needs a validation split"):
        load_config("configs/default.yaml", ["eval.split=validation"])
