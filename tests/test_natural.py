"""Natural partitions (tasks/data/natural.py): the dataset's owners are the clients, filtered, capped, split."""
from __future__ import annotations

import numpy as np
import pytest

from orchestrator.experiment.config import load_config
from tasks.data.natural import Select, client_owners, federation_test_rows, split_natural
from tasks.data.partition import PartitionError, make_partition

# owner of each of ten samples: owner 0 holds 3, owner 1 holds 1, owner 2 holds 2, owner 3 holds 4
OWNERS = np.array([0, 0, 0, 1, 2, 2, 3, 3, 3, 3])


def split(num_clients, min_size, select, seed=0):
    return split_natural(OWNERS, num_clients, min_size, Select(select), np.random.default_rng(seed))


def test_largest_keeps_the_biggest_owners_biggest_first():
    parts = split(2, 2, "largest")
    assert [p.tolist() for p in parts] == [[6, 7, 8, 9], [0, 1, 2]]


def test_first_keeps_the_dataset_order_and_drops_owners_below_min_size():
    parts = split(3, 2, "first")
    assert [p.tolist() for p in parts] == [[0, 1, 2], [4, 5], [6, 7, 8, 9]]  # owner 1 (one sample) left out


def test_random_draws_from_the_seed_among_the_eligible_in_dataset_order():
    draws = {tuple(tuple(p.tolist()) for p in split(2, 2, "random", seed)) for seed in range(20)}
    assert draws == {((0, 1, 2), (4, 5)), ((0, 1, 2), (6, 7, 8, 9)), ((4, 5), (6, 7, 8, 9))}
    assert split(2, 2, "random", 3)[0].tolist() == split(2, 2, "random", 3)[0].tolist()


def test_too_few_owners_is_one_line_saying_how_many_qualify():
    with pytest.raises(PartitionError) as err:
        split(4, 2, "largest")
    assert str(err.value) == ("data.num_clients = 4: only 3 of the dataset's 4 natural clients hold ≥ 2 training "
                              "samples (data.partition.min_size); lower one or the other")


def natural_cfg(**overrides):
    sets = {"data.partition.kind": "natural", "data.partition.min_size": 2, "data.num_clients": 3,
            "data.client_test_fraction": 0.25, **overrides}
    return load_config("configs/default.yaml", [f"{k}={v}" for k, v in sets.items()]).data


def test_make_partition_keeps_each_owner_on_one_client_with_its_own_test_split():
    p = make_partition(np.zeros(len(OWNERS), np.int64), natural_cfg(), seed=0, owners=OWNERS)
    assert [sorted([*tr, *te]) for tr, te in zip(p.train, p.test)] == [[6, 7, 8, 9], [0, 1, 2], [4, 5]]
    assert [len(te) for te in p.test] == [1, 1, 0]  # round(4·0.25), round(3·0.25), round(2·0.25)
    assert client_owners(p, OWNERS).tolist() == [3, 0, 2]
    again = make_partition(np.zeros(len(OWNERS), np.int64), natural_cfg(), seed=0, owners=OWNERS)
    assert again.content_hash() == p.content_hash()


def test_a_dataset_without_owners_cannot_be_split_naturally():
    with pytest.raises(PartitionError, match="does not say which client each sample belongs to"):
        make_partition(np.zeros(10, np.int64), natural_cfg(), seed=0)


def test_grouped_rotation_domains_would_split_an_owner():
    cfg = natural_cfg(**{"data.domains.kind": "rotation", "data.num_clients": 2})
    with pytest.raises(PartitionError, match="use assign: per_client"):
        make_partition(np.zeros(len(OWNERS), np.int64), cfg, seed=0, owners=OWNERS)


def test_the_global_test_set_keeps_the_federations_owners():
    assert federation_test_rows(np.array([3, 1, 0, 3, 2]), np.array([3, 0])).tolist() == [0, 2, 3]


def test_a_hundred_thousand_owners_are_split_one_client_each():
    rng = np.random.default_rng(0)
    owners = np.concatenate([np.arange(100_000), rng.integers(0, 100_000, size=900_000)])
    parts = split_natural(owners, 100_000, 1, Select.LARGEST, rng)
    sizes = np.array([len(p) for p in parts])
    assert sizes.sum() == 1_000_000 and (np.diff(sizes) <= 0).all()
    assert all(len(np.unique(owners[p])) == 1 for p in parts[::997])
