"""Partitioners: deterministic, exhaustive, sized, skewed as α says, domains as configured; stored once."""
from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
import torch

from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import load_or_make_partition, prepare_data
from tasks.data.datasets import load_digits_dataset
from tasks.data.partition import (
    Partition,
    PartitionError,
    Tally,
    label_entropy,
    make_partition,
    split_dirichlet,
)


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


def test_a_test_set_at_one_angle_each_sees_each_image_once_at_its_angle(tmp_path):
    common = [f"data.partitions_dir={tmp_path}", "data.domains.kind=rotation", "data.domains.assign=per_client",
              "data.domains.angles=[0, 90, 180]"]
    every = prepare_data(load_config("configs/default.yaml", common)).test_sets()
    once = prepare_data(load_config("configs/default.yaml", [*common, "data.domains.test=one_angle_each"])).test_sets()
    assert set(once) == set(every) == {"rot0", "rot90", "rot180"}
    for d, name in enumerate(["rot0", "rot90", "rot180"]):  # image j at angle j mod 3, as every_angle rotates it
        assert torch.equal(once[name][0], every[name][0][d::3]) and torch.equal(once[name][1], every[name][1][d::3])
    assert sum(len(y) for _, y in once.values()) == len(every["rot0"][1])
    # a validation split evaluated on is seen the same way: what tunes a table scores as its test set does
    validation = [*common, "data.validation_fraction=0.2", "eval.split=validation"]
    every_val = prepare_data(load_config("configs/default.yaml", validation)).test_sets()
    once_val = prepare_data(load_config("configs/default.yaml", [*validation, "data.domains.test=one_angle_each"])
                            ).test_sets()
    for d, name in enumerate(["rot0", "rot90", "rot180"]):
        assert torch.equal(once_val[name][0], every_val[name][0][d::3])
        assert torch.equal(once_val[name][1], every_val[name][1][d::3])
    assert sum(len(y) for _, y in once_val.values()) == len(every_val["rot0"][1])


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


@pytest.mark.parametrize(("overrides", "expected"), [
    ([], "d8d00df5788ba6bd"),  # configs/default.yaml
    (["data.partition.alpha=0.5", "data.partition.cap=true", "data.partition.min_classes=2", "data.partition.min_size=3",
      "data.num_clients=12", "seed=3", "data.domains.kind=rotation"], "d264af28ff4611fd"),
])
def test_content_hash_of_known_configs_is_unchanged(digits_y, overrides, expected):
    # recorded before the partition code was vectorised: runs and checkpoints keep these hashes
    cfg = load_config("configs/default.yaml", overrides)
    assert make_partition(digits_y, cfg.data, cfg.seed).content_hash() == expected


@pytest.mark.parametrize(("clients", "min_size"), [(100, 2), (1000, 1)])
def test_repair_tops_up_the_last_draw_from_the_largest_clients(digits_y, clients, min_size):
    """α = 0.1 over 100 / 1,000 clients of the digits: no draw gives every client the minimum; the repair does."""
    idx = np.arange(len(digits_y))
    drawn = split_dirichlet(idx, digits_y, clients, 0.1, 0, False, np.random.default_rng(7), max_tries=1,
                            min_classes=0)
    tally = Tally()
    repaired = split_dirichlet(idx, digits_y, clients, 0.1, min_size, False, np.random.default_rng(7), max_tries=1,
                               repair=True, tally=tally)
    before, after = np.array([len(p) for p in drawn]), np.array([len(p) for p in repaired])
    assert before.min() < min_size and after.min() >= min_size
    assert tally == Tally(draws=1, moved=int(np.maximum(min_size - before, 0).sum()))
    assert np.all(after[before < min_size] == min_size)  # recipients get exactly what they lack
    donors = after < before
    assert before[donors].min() >= before[~donors & (before >= min_size)].max(initial=0)  # the largest give
    assert np.array_equal(np.sort(np.concatenate(repaired)), idx)
    again = split_dirichlet(idx, digits_y, clients, 0.1, min_size, False, np.random.default_rng(7), max_tries=1,
                            repair=True)
    assert all(np.array_equal(a, b) for a, b in zip(repaired, again))


def test_repair_is_an_option_redraws_fail_without_it(digits_y):
    sets = {"data.num_clients": 100, "data.partition.min_size": 2, "data.partition.max_draws": 3,
            "data.client_test_fraction": 0}
    with pytest.raises(PartitionError, match="in 3 draws; .* or set data.partition.repair: true"):
        partition(digits_y, **sets)
    p = partition(digits_y, **sets, **{"data.partition.repair": True})
    assert min(len(t) for t in p.train) >= 2 and p.tally.draws == 3 and p.tally.moved > 0
    assert p.content_hash() == partition(digits_y, **sets, **{"data.partition.repair": True}).content_hash()
    with pytest.raises(PartitionError, match="tops up sizes only"):
        partition(digits_y, **sets, **{"data.partition.repair": True, "data.partition.min_classes": 2})


def test_a_100000_client_partition_is_stored_and_reloaded(tmp_path):
    clients = 100_000
    y = np.random.default_rng(0).permutation(np.arange(20 * clients) % 10)
    cfg = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}", f"data.num_clients={clients}",
                                               "data.partition.max_draws=1", "data.partition.repair=true"])
    made, uri = load_or_make_partition(cfg, y)
    reloaded, uri2 = load_or_make_partition(cfg, y)
    assert uri == uri2 and reloaded is not made
    assert reloaded.num_clients == clients and reloaded.tally == made.tally and made.tally.moved > 0
    assert reloaded.content_hash() == made.content_hash()
    for split in ("train", "test"):
        a, b = getattr(made, split), getattr(reloaded, split)
        assert [len(p) for p in a] == [len(p) for p in b] and np.array_equal(np.concatenate(a), np.concatenate(b))
    sizes = np.array([len(tr) + len(te) for tr, te in zip(made.train, made.test)])
    assert sizes.min() >= 10 and sizes.sum() == len(y)
    unpickled = pickle.loads(pickle.dumps(reloaded))  # as Ray's object store passes it to the actors
    assert unpickled.content_hash() == made.content_hash() and unpickled.tally == made.tally


# ---------------------------------------------------------------------------- a damaged stored partition
def damage_truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def damage_empty(path):
    path.write_bytes(b"")


def damage_garbage(path):
    path.write_bytes(b"PAR1 this is not a Parquet file PAR1")


def damage_other_table(path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1, 2, 3]}), path)


def damage_client_ids(path):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    pq.write_table(table.set_column(0, "client", pc.add(table["client"], pa.scalar(100, pa.int32()))), path)


def damage_content(path):
    """Two samples swapped between clients, the recorded hash kept: a silently different partition."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    sample = table["sample"].to_numpy().copy()
    first_of_client_1 = int(np.argmax(table["client"].to_numpy() == 1))
    sample[[0, first_of_client_1]] = sample[[first_of_client_1, 0]]
    pq.write_table(table.set_column(1, "sample", [sample]), path)


@pytest.mark.parametrize(("damage", "problem"), [
    (damage_truncate, r"not a readable Parquet file \("),
    (damage_empty, r"not a readable Parquet file \("),
    (damage_garbage, r"not a readable Parquet file \("),
    (damage_other_table, "no client column of the expected type"),
    (damage_client_ids, r"client ids outside 0\.\.9"),
    (damage_content, "its content does not match the hash recorded in it"),
])
def test_a_damaged_stored_partition_is_one_line_naming_it(tmp_path, digits_y, damage, problem):
    cfg = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}"])
    _, uri = load_or_make_partition(cfg, digits_y)
    damage(tmp_path / uri.split("/")[-1])
    with pytest.raises(PartitionError, match=rf"^stored partition {re.escape(uri)}: {problem}.*; delete it and it is rebuilt$"):
        load_or_make_partition(cfg, digits_y)


def test_mooring_data_show_on_a_damaged_partition_is_one_line_and_exit_2(tmp_path, capsys):
    from orchestrator.cli import main

    args = ["data", "show", "configs/default.yaml", "--set", f"data.partitions_dir={tmp_path}"]
    assert main(args) == 0
    stored = next(tmp_path.glob("partition-*.parquet"))
    damage_truncate(stored)
    capsys.readouterr()
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"error: stored partition {stored}: not a readable Parquet file (" + err.split(" (", 1)[1]
    assert err.count("\n") == 1 and err.endswith("; delete it and it is rebuilt\n")


@pytest.mark.parametrize("assign", ["grouped", "per_client"])
def test_many_clients_data_at_once_equal_each_client_s_own(tmp_path, assign):
    """FederatedData.clients_data views each domain's images in one pass (a host builds every shard it keeps this
    way at start-up): bitwise the tensors client_data builds one client at a time, rotated domains included, in
    the order asked."""
    import torch

    cfg = load_config("configs/default.yaml", ["data.num_clients=12", "data.domains.kind=rotation",
                                               f"data.domains.assign={assign}", "data.partition.repair=true",
                                               f"data.partitions_dir={tmp_path}"])
    data = prepare_data(cfg)
    assert len(set(data.partition.domain.tolist())) == 4
    asked = [5, 0, 11, 3, 7]
    for cid, many in zip(asked, data.clients_data(asked)):
        one = data.client_data(cid)
        assert many.client_id == cid and many.domain == one.domain
        for field in ("x", "y", "x_test", "y_test"):
            assert getattr(many, field).dtype == getattr(one, field).dtype
            assert torch.equal(getattr(many, field), getattr(one, field)), (cid, field)
