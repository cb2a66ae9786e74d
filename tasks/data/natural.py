"""Natural partitions: the dataset says which client each sample belongs to (a writer, a speaking role, a user).

A dataset with owners (`ArrayDataset.owners`, one natural client id per training sample) is split by them:
owners with fewer than `min_size` training samples are left out, and `num_clients` of the rest are kept, chosen
by `select`:
- largest: the owners with the most samples (ties: the lower owner id first), client 0 the largest;
- first: the owners in the dataset's order (a play's roles in order of appearance, LEAF's user order);
- random: drawn without replacement from the partition seed, then in the dataset's order.
Every step is a handful of array operations, so a federation of 100,000 owners is split in well under a second.
The per-client test split and the Parquet storage are the other partitions' (tasks/data/partition.py).
"""
from __future__ import annotations

from dataclasses import replace
from enum import Enum

import numpy as np

from tasks.data.datasets import ArrayDataset
from tasks.data.partition_types import Partition, PartitionError, group_by


class Select(str, Enum):
    LARGEST = "largest"
    FIRST = "first"
    RANDOM = "random"


def chosen_owners(sizes: np.ndarray, num_clients: int, min_size: int, select: Select,
                  rng: np.random.Generator) -> np.ndarray:
    """The owner ids that become clients 0..num_clients−1, in client order."""
    eligible = np.flatnonzero(sizes >= max(min_size, 1))
    if len(eligible) < num_clients:
        raise PartitionError(
            f"data.num_clients = {num_clients}: only {len(eligible)} of the dataset's {len(sizes)} natural clients "
            f"hold ≥ {max(min_size, 1)} training samples (data.partition.min_size); lower one or the other")
    if select == Select.LARGEST:
        order = eligible[np.lexsort((eligible, -sizes[eligible]))]
        return order[:num_clients]
    if select == Select.RANDOM:
        return np.sort(rng.choice(eligible, num_clients, replace=False))
    return eligible[:num_clients]


def split_natural(owners: np.ndarray, num_clients: int, min_size: int, select: Select,
                  rng: np.random.Generator) -> list[np.ndarray]:
    """Each client's training indices: every sample of the owner it stands for."""
    sizes = np.bincount(owners) if len(owners) else np.zeros(0, np.int64)
    kept = chosen_owners(sizes, num_clients, min_size, select, rng)
    client_of = np.full(len(sizes), -1, dtype=np.int64)
    client_of[kept] = np.arange(num_clients)
    clients = client_of[owners]
    members = np.flatnonzero(clients >= 0)
    return group_by(clients[members], members, num_clients)


def client_owners(partition: Partition, owners: np.ndarray) -> np.ndarray:
    """The owner id each client of a natural partition stands for (read back from its samples)."""
    first = [tr[0] if len(tr) else te[0] for tr, te in zip(partition.train, partition.test)]
    return owners[np.asarray(first, dtype=np.int64)]


def federation_test_rows(test_owners: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Rows of the global test set whose owner is one of the federation's clients (`members`: owner ids)."""
    return np.flatnonzero(np.isin(test_owners, members))


def natural_parts(owners: np.ndarray | None, data_cfg, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """make_partition's `natural` kind: the clients' training indices and their rotation domains."""
    if owners is None:
        raise PartitionError(f"data.partition.kind = 'natural': dataset {data_cfg.dataset!r} does not say which "
                             "client each sample belongs to; natural partitions need shakespeare or a LEAF set")
    num_clients, domains = data_cfg.num_clients, data_cfg.domains
    if domains.kind != "none" and domains.assign != "per_client":
        raise PartitionError("data.domains.assign = 'grouped': a natural partition keeps each owner's samples "
                             "together; use assign: per_client")
    part = data_cfg.partition
    parts = split_natural(owners, num_clients, part.min_size, Select(part.select), rng)
    domain = np.arange(num_clients) % len(domains.angles) if domains.kind != "none" else np.zeros(num_clients, np.int64)
    return parts, domain


def keep_federation_test(dataset: ArrayDataset, partition: Partition) -> ArrayDataset:
    """The dataset with its global test set cut to the held-out samples of the federation's own owners (as LEAF
    evaluates), when the dataset records test owners: a cap of 100 roles then is not tested on 1,000."""
    if dataset.owners is None or dataset.test_owners is None:
        return dataset
    rows = federation_test_rows(dataset.test_owners, client_owners(partition, dataset.owners))
    return replace(dataset, x_test=dataset.x_test[rows], y_test=dataset.y_test[rows],
                   test_owners=dataset.test_owners[rows])
