"""Partitioners: deterministic, exhaustive, sized, skewed as α says, domains as configured; stored once."""
from __future__ import annotations

import numpy as np
import pytest

from orchestrator.config import load_config
from orchestrator.datasets import load_or_make_partition, prepare_data
from tasks.data.datasets import load_digits_dataset
from tasks.data.partition import Partition, label_entropy, make_partition


@pytest.fixture(scope="module")
def digits_y():
    cfg = load_config("configs/default.yaml")
    return load_digits_dataset(cfg.data.model_copy(update={"split_seed": 0})).y_train


def partition(y, seed=0, **overrides):
    cfg = load_config("configs/default.yaml", [f"{k}={v}" for k, v in overrides.items()])
    return make_partition(y, cfg.data, seed)


def all_indices(p: Partition) -> np.ndarray:
    return np.concatenate([*p.train, *p.test])


@pytest.mark.parametrize("kind", ["iid", "dirichlet", "dirichlet_equal", "shards"])
def test_same_seed_same_partition_other_seed_other(digits_y, kind):
    a = partition(digits_y, 0, **{"data.partition.kind": kind})
    b = partition(digits_y, 0, **{"data.partition.kind": kind})
    c = partition(digits_y, 1, **{"data.partition.kind": kind})
    assert a.content_hash() == b.content_hash() != c.content_hash()


@pytest.mark.parametrize("kind", ["iid", "dirichlet", "shards"])
def test_every_training_sample_assigned_exactly_once(digits_y, kind):
    idx = all_indices(partition(digits_y, **{"data.partition.kind": kind}))
    assert np.array_equal(np.sort(idx), np.arange(len(digits_y)))


def test_dirichlet_respects_minimum_size(digits_y):
    p = partition(digits_y, **{"data.partition.alpha": 0.05, "data.partition.min_size": 25,
                               "data.client_test_fraction": 0})
    assert min(len(t) for t in p.train) >= 25


def test_dirichlet_cap_limits_clients_to_their_share(digits_y):
    p = partition(digits_y, **{"data.partition.cap": True, "data.client_test_fraction": 0})
    # a client stops receiving new classes once it holds n/N; one class chunk can overshoot it
    assert max(len(t) for t in p.train) < 2.5 * len(digits_y) / 10


def test_skew_grows_as_alpha_shrinks(digits_y):
    def mean_entropy(alpha):
        vals = []
        for seed in range(3):
            p = partition(digits_y, seed, **{"data.partition.alpha": alpha, "data.partition.min_size": 5})
            vals.append(label_entropy(p.class_histogram(digits_y, 10)).mean())
        return np.mean(vals)

    e = [mean_entropy(a) for a in (100.0, 1.0, 0.1)]
    assert e[0] > e[1] > e[2]
    assert e[0] > 2.2  # near log(10) = 2.30 for almost-IID


def test_dirichlet_equal_gives_equal_sizes_and_shards_give_c_classes(digits_y):
    eq = partition(digits_y, **{"data.partition.kind": "dirichlet_equal", "data.client_test_fraction": 0})
    assert {len(t) for t in eq.train} == {len(digits_y) // 10}
    sh = partition(digits_y, **{"data.partition.kind": "shards", "data.partition.classes_per_client": 2,
                                "data.client_test_fraction": 0})
    assert max((h > 0).sum() for h in sh.class_histogram(digits_y, 10)) <= 3  # a shard can straddle two labels


def test_grouped_rotation_domains_split_the_data_into_equal_parts(digits_y):
    p = partition(digits_y, **{"data.num_clients": 12, "data.domains.kind": "rotation",
                               "data.partition.kind": "iid", "data.client_test_fraction": 0})
    assert list(p.domain) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    per_domain = [sum(len(p.train[c]) for c in range(12) if p.domain[c] == d) for d in range(4)]
    assert max(per_domain) - min(per_domain) <= 1


def test_per_client_rotation_and_rotated_test_sets(tmp_path):
    cfg = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}", "data.domains.kind=rotation",
                                               "data.domains.assign=per_client", "data.domains.angles=[0, 90]"])
    data = prepare_data(cfg)
    assert list(data.partition.domain) == [0, 1] * 5
    tests = data.test_sets()
    assert set(tests) == {"rot0", "rot90"}
    x0, x90 = tests["rot0"][0], tests["rot90"][0]
    # a 90° rotation of an 8×8 image moves pixel (r, c) to (7 − c, r)
    assert np.allclose(x90[:, 0, 7 - 2, 3].numpy(), x0[:, 0, 3, 2].numpy(), atol=1e-5)
    client1 = data.client_data(1)
    raw = data.dataset.x_train[data.partition.train[1]]
    assert np.allclose(client1.x[:, 0, 7 - 2, 3].numpy(), raw[:, 0, 3, 2], atol=1e-5)


def test_partition_is_stored_once_as_parquet_and_reloaded(tmp_path, digits_y):
    cfg = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}"])
    first, uri = load_or_make_partition(cfg, digits_y)
    stamp = (tmp_path / uri.split("/")[-1]).stat().st_mtime_ns
    again, uri2 = load_or_make_partition(cfg, digits_y)
    assert uri == uri2 and (tmp_path / uri.split("/")[-1]).stat().st_mtime_ns == stamp
    assert again.content_hash() == first.content_hash()
    import pyarrow.parquet as pq

    table = pq.read_table(uri)
    assert table.column_names == ["client", "sample", "split", "domain"]
    assert table.schema.metadata[b"content_hash"].decode() == first.content_hash()
