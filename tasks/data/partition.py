"""Partitioners: which training samples each client holds, its own test split, and its feature domain.

All are deterministic for a seed and identical across methods. A partition is a table (client, sample,
split, domain), stored as Parquet with a content hash, written once and reloaded.

- iid: an even random split.
- dirichlet: per class k, p ~ Dir_N(α); with `cap`, clients already holding ≥ n/N samples get p_i = 0
  (FedLab / NIID-Bench / PFLlib, fedfa.md §6.2, fednh.md §7, fedsa.md §6); redrawn until every client has
  `min_size` samples and `min_classes` classes (fednh.md §7's official code asks for 2; it gives up after 3
  draws and swaps chunks, here the split is redrawn until it holds).
- dirichlet_equal: equal sizes ⌊n/N⌋, each client's class mix q_i ~ Dir(α·1_C) drawn without replacement
  from per-class pools (feddebias.md §10.1 step 3).
- shards: label-sorted shards, #C per client (FedLab `shards`, fedfa.md §6.2).
- rotation domains: `grouped` splits the training set into one equal part per angle and partitions each
  part over its clients (fedfa.md §11); `per_client` gives client i the angle i mod len(angles)
  (feddebias.md §10.1 step 4).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa


class PartitionError(Exception):
    pass


@dataclass
class Partition:
    train: list[np.ndarray]  # per client: indices into the dataset's training set
    test: list[np.ndarray]  # per client: its own held-out indices (also from the training set)
    domain: np.ndarray  # per client: index into the rotation angles (0 without domains)

    @property
    def num_clients(self) -> int:
        return len(self.train)

    def to_table(self) -> pa.Table:
        clients, samples, splits = [], [], []
        for c in range(self.num_clients):
            for split, idx in (("train", self.train[c]), ("test", self.test[c])):
                clients.append(np.full(len(idx), c, dtype=np.int32))
                samples.append(idx.astype(np.int64))
                splits += [split] * len(idx)
        client = np.concatenate(clients) if clients else np.zeros(0, np.int32)
        return pa.table({
            "client": client,
            "sample": np.concatenate(samples) if samples else np.zeros(0, np.int64),
            "split": pa.array(splits, pa.string()),
            "domain": self.domain[client].astype(np.int16),
        })

    @classmethod
    def from_table(cls, table: pa.Table, num_clients: int) -> Partition:
        client = table["client"].to_numpy()
        sample = table["sample"].to_numpy()
        split = np.asarray(table["split"].to_pylist())
        domain = np.zeros(num_clients, dtype=np.int64)
        domain[client] = table["domain"].to_numpy()
        train = [np.sort(sample[(client == c) & (split == "train")]) for c in range(num_clients)]
        test = [np.sort(sample[(client == c) & (split == "test")]) for c in range(num_clients)]
        return cls(train, test, domain)

    def content_hash(self) -> str:
        h = hashlib.sha256()
        for c in range(self.num_clients):
            for part in (self.train[c], self.test[c], self.domain[c:c + 1]):
                h.update(np.ascontiguousarray(part, dtype=np.int64).tobytes())
                h.update(b"|")
        return h.hexdigest()[:16]

    def class_histogram(self, y: np.ndarray, num_classes: int) -> np.ndarray:
        """(clients, classes) counts of each client's training samples."""
        return np.stack([np.bincount(y[idx], minlength=num_classes) for idx in self.train]) if self.train else np.zeros((0, num_classes))


# ------------------------------------------------------------------------------------- label splits
def split_iid(n_idx: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [np.sort(part) for part in np.array_split(rng.permutation(n_idx), num_clients)]


def split_dirichlet(idx: np.ndarray, y: np.ndarray, num_clients: int, alpha: float, min_size: int, cap: bool,
                    rng: np.random.Generator, max_tries: int = 1000, min_classes: int = 1) -> list[np.ndarray]:
    labels = y[idx]
    classes = np.unique(labels)
    if min_size * num_clients > len(idx):
        raise PartitionError(
            f"data.partition.min_size = {min_size}: {num_clients} clients × {min_size} exceeds the {len(idx)} samples"
        )
    for _ in range(max_tries):
        parts: list[list[int]] = [[] for _ in range(num_clients)]
        for k in classes:
            members = rng.permutation(idx[labels == k])
            p = rng.dirichlet(np.full(num_clients, alpha))
            if cap:
                p = p * np.array([len(part) < len(idx) / num_clients for part in parts])
                p = p / p.sum() if p.sum() > 0 else np.full(num_clients, 1.0 / num_clients)
            cuts = (np.cumsum(p) * len(members)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(members, cuts)):
                part.extend(chunk.tolist())
        if min(len(part) for part in parts) >= min_size and min(
                len(np.unique(y[part])) for part in parts) >= min_classes:
            return [np.sort(np.asarray(part, dtype=np.int64)) for part in parts]
    raise PartitionError(
        f"data.partition: no Dirichlet split with α = {alpha} gave every client ≥ {min_size} samples and "
        f"≥ {min_classes} classes in {max_tries} draws; lower min_size / min_classes or raise alpha"
    )


def split_dirichlet_equal(idx: np.ndarray, y: np.ndarray, num_clients: int, alpha: float,
                          rng: np.random.Generator) -> list[np.ndarray]:
    num_classes = int(y.max()) + 1
    pools = [list(rng.permutation(idx[y[idx] == k])) for k in range(num_classes)]
    size = len(idx) // num_clients
    parts = []
    for _ in range(num_clients):
        q = rng.dirichlet(np.full(num_classes, alpha))
        taken = []
        for _ in range(size):
            q = q * np.array([len(pool) > 0 for pool in pools])
            if q.sum() == 0:
                q = np.array([float(len(pool) > 0) for pool in pools])
            k = rng.choice(num_classes, p=q / q.sum())
            taken.append(pools[k].pop())
        parts.append(np.sort(np.asarray(taken, dtype=np.int64)))
    return parts


def split_shards(idx: np.ndarray, y: np.ndarray, num_clients: int, classes_per_client: int,
                 rng: np.random.Generator) -> list[np.ndarray]:
    order = idx[np.argsort(y[idx], kind="stable")]
    shards = np.array_split(order, num_clients * classes_per_client)
    assignment = rng.permutation(len(shards)).reshape(num_clients, classes_per_client)
    return [np.sort(np.concatenate([shards[s] for s in row])) for row in assignment]


def split_labels(idx: np.ndarray, y: np.ndarray, num_clients: int, cfg, rng: np.random.Generator) -> list[np.ndarray]:
    if cfg.kind == "iid":
        return split_iid(idx, num_clients, rng)
    if cfg.kind == "dirichlet":
        return split_dirichlet(idx, y, num_clients, cfg.alpha, cfg.min_size, cfg.cap, rng,
                               min_classes=cfg.min_classes)
    if cfg.kind == "dirichlet_equal":
        return split_dirichlet_equal(idx, y, num_clients, cfg.alpha, rng)
    return split_shards(idx, y, num_clients, cfg.classes_per_client, rng)


# ------------------------------------------------------------------------------------------ domains
def assign_domains(y: np.ndarray, num_clients: int, data_cfg, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """Client training indices and domains, for the configured domain scheme."""
    all_idx = np.arange(len(y))
    dom = data_cfg.domains
    if dom.kind == "none":
        return split_labels(all_idx, y, num_clients, data_cfg.partition, rng), np.zeros(num_clients, dtype=np.int64)
    n_dom = len(dom.angles)
    if dom.assign == "per_client":
        parts = split_labels(all_idx, y, num_clients, data_cfg.partition, rng)
        return parts, np.arange(num_clients) % n_dom
    if num_clients % n_dom:
        raise PartitionError(
            f"data.num_clients = {num_clients}: grouped rotation domains need a multiple of the {n_dom} angles"
        )
    per_domain = num_clients // n_dom
    parts: list[np.ndarray] = []
    for chunk in np.array_split(rng.permutation(all_idx), n_dom):
        parts += split_labels(np.sort(chunk), y, per_domain, data_cfg.partition, rng)
    return parts, np.repeat(np.arange(n_dom), per_domain)


def make_partition(y_train: np.ndarray, data_cfg, seed: int) -> Partition:
    rng = np.random.default_rng(seed)
    parts, domain = assign_domains(y_train, data_cfg.num_clients, data_cfg, rng)
    train, test = [], []
    for part in parts:
        shuffled = rng.permutation(part)
        n_test = int(round(len(part) * data_cfg.client_test_fraction))
        test.append(np.sort(shuffled[:n_test]))
        train.append(np.sort(shuffled[n_test:]))
    return Partition(train, test, domain)


def rotate_images(x: np.ndarray, angle: float) -> np.ndarray:
    """Rotate NCHW images by `angle` degrees about their centre (fedfa.md §11, feddebias.md §10.1)."""
    if angle % 360 == 0:
        return x
    from scipy.ndimage import rotate

    return rotate(x, angle, axes=(2, 3), reshape=False, order=1, mode="constant", cval=0.0).astype(np.float32)


def label_entropy(hist: np.ndarray) -> np.ndarray:
    """Per-client entropy (nats) of the label distribution: lower means more skew."""
    p = hist / np.maximum(hist.sum(axis=1, keepdims=True), 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=1)
