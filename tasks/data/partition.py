"""Partitioners: which training samples each client holds, its own test split, and its feature domain.

All are deterministic for a seed and identical across methods. A partition is a table (client, sample,
split, domain), stored as Parquet with a content hash, written once and reloaded.

- iid: an even random split.
- dirichlet: per class k, p ~ Dir_N(α); with `cap`, clients already holding ≥ n/N samples get p_i = 0
  (FedLab / NIID-Bench / PFLlib, docs/methods/fedfa.md §6.2, docs/methods/fednh.md §7, docs/methods/fedsa.md §6); redrawn until every client has
  `min_size` samples and `min_classes` classes (docs/methods/fednh.md §7's official code asks for 2; it gives up after 3
  draws and swaps chunks, here the split is redrawn until it holds), at most `max_draws` times. With `repair`,
  the last draw that still misses `min_size` is repaired instead of rejected: samples move from the largest
  clients to those below the minimum (the only way at α = 0.1 with 1,000+ clients; see `repair_sizes`).
- dirichlet_equal: equal sizes ⌊n/N⌋, each client's class mix q_i ~ Dir(α·1_C) drawn without replacement
  from per-class pools (docs/methods/feddebias.md §10.1 step 3).
- shards: label-sorted shards, #C per client (FedLab `shards`, docs/methods/fedfa.md §6.2).
- rotation domains: `grouped` splits the training set into one equal part per angle and partitions each
  part over its clients (docs/methods/fedfa.md §11); `per_client` gives client i the angle i mod len(angles)
  (docs/methods/feddebias.md §10.1 step 4).
- natural: the dataset's own owners (writer, speaking role, user) are the clients (tasks/data/natural.py).
- a kind of one's own: a `module:function` reference or an installed package's entry point
  (tasks/data/partition_kinds.py), split like the built-in ones and checked before it is used.
"""
from __future__ import annotations

import numpy as np

from tasks.data.partition_kinds import SplitRequest, outside_kind, split_outside
from tasks.data.partition_types import Partition, PartitionError, Tally, group_by


# ------------------------------------------------------------------------------------- label splits
def split_iid(n_idx: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [np.sort(part) for part in np.array_split(rng.permutation(n_idx), num_clients)]


def split_dirichlet(idx: np.ndarray, y: np.ndarray, num_clients: int, alpha: float, min_size: int, cap: bool,
                    rng: np.random.Generator, max_tries: int = 1000, min_classes: int = 1, repair: bool = False,
                    tally: Tally | None = None) -> list[np.ndarray]:
    tally = tally if tally is not None else Tally()
    labels = y[idx]
    classes = np.unique(labels)
    if min_size * num_clients > len(idx):
        raise PartitionError(
            f"data.partition.min_size = {min_size}: {num_clients} clients × {min_size} exceeds the {len(idx)} samples"
        )
    for _ in range(max_tries):
        tally.draws += 1
        samples, owner, class_counts = dirichlet_draw(idx, labels, classes, num_clients, alpha, cap, rng)
        sizes = np.bincount(owner, minlength=num_clients)
        if sizes.min() >= min_size and class_counts.min() >= min_classes:
            return group_by(owner, samples, num_clients)
    if not repair:
        raise PartitionError(
            f"data.partition: no Dirichlet split with α = {alpha} gave every client ≥ {min_size} samples and "
            f"≥ {min_classes} classes in {max_tries} draws; lower min_size / min_classes, raise alpha, or set "
            f"data.partition.repair: true"
        )
    target = max(min_size, 1)  # a client without samples has no class, and min_classes ≥ 1
    if target * num_clients > len(idx):
        raise PartitionError(f"data.partition.repair: {num_clients} clients cannot each get a sample of the {len(idx)}")
    tally.moved += repair_sizes(owner, sizes, target, rng)
    if classes_per_client(owner, y[samples], num_clients).min() < min_classes:
        raise PartitionError(
            f"data.partition.repair: moving samples gave every client ≥ {min_size} samples but not ≥ {min_classes} "
            f"classes (the repair tops up sizes only); lower min_classes or raise alpha"
        )
    return group_by(owner, samples, num_clients)


def dirichlet_draw(idx: np.ndarray, labels: np.ndarray, classes: np.ndarray, num_clients: int, alpha: float,
                   cap: bool, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One draw: each class's samples, shuffled, cut into one chunk per client by p ~ Dir_N(α).
    Returns (samples, the client each goes to, the number of classes each client got)."""
    sizes = np.zeros(num_clients, dtype=np.int64)
    class_counts = np.zeros(num_clients, dtype=np.int64)
    samples, owners = [], []
    for k in classes:
        members = rng.permutation(idx[labels == k])
        p = rng.dirichlet(np.full(num_clients, alpha))
        if cap:
            p = p * (sizes < len(idx) / num_clients)
            p = p / p.sum() if p.sum() > 0 else np.full(num_clients, 1.0 / num_clients)
        cuts = np.minimum((np.cumsum(p) * len(members)).astype(int)[:-1], len(members))
        chunk = np.diff(np.concatenate([[0], cuts, [len(members)]]))
        sizes += chunk
        class_counts += chunk > 0
        samples.append(members)
        owners.append(np.repeat(np.arange(num_clients), chunk))
    return np.concatenate(samples), np.concatenate(owners), class_counts


def classes_per_client(owner: np.ndarray, labels: np.ndarray, num_clients: int) -> np.ndarray:
    width = int(labels.max()) + 1 if len(labels) else 1
    pairs = np.unique(owner.astype(np.int64) * width + labels)
    return np.bincount(pairs // width, minlength=num_clients)


def repair_sizes(owner: np.ndarray, sizes: np.ndarray, min_size: int, rng: np.random.Generator) -> int:
    """Give every client ≥ min_size samples by moving samples (in place in `owner`) from the largest clients,
    lowered towards a common level that stays ≥ min_size. Which samples leave a donor and which recipient
    each joins are drawn from `rng`. Returns how many moved."""
    need = np.maximum(min_size - sizes, 0)
    if need.sum() == 0:
        return 0
    give = donations(sizes, int(need.sum()))
    shuffled = np.argsort(owner * len(owner) + rng.permutation(len(owner)))  # grouped by client, random within
    rank = np.empty(len(owner), dtype=np.int64)
    rank[shuffled] = np.arange(len(owner)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    leaving = rng.permutation(np.flatnonzero(rank < give[owner]))
    owner[leaving] = np.repeat(np.arange(len(sizes)), need)
    return int(need.sum())


def donations(sizes: np.ndarray, total: int) -> np.ndarray:
    """How many samples each client gives so that `total` leave the largest ones: every client above a level L
    drops to L (to L + 1 for the lowest-numbered ones where that gives more than `total`)."""
    def above(level: int) -> int:
        return int(np.maximum(sizes - level, 0).sum())

    lo, hi = 0, int(sizes.max())  # above(lo) ≥ total > above(hi): find the highest level that still gives enough
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if above(mid) >= total else (lo, mid)
    give = np.maximum(sizes - lo, 0)
    excess = int(give.sum()) - total
    give[np.flatnonzero(sizes > lo)[:excess]] -= 1
    return give


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


def split_labels(idx: np.ndarray, y: np.ndarray, num_clients: int, cfg, rng: np.random.Generator,
                 tally: Tally) -> list[np.ndarray]:
    if (outside := outside_kind(cfg.kind)) is not None:  # a kind of one's own (tasks/data/partition_kinds.py)
        return split_outside(outside, SplitRequest(idx, y, num_clients, rng, cfg), cfg.kind)
    if cfg.kind == "iid":
        return split_iid(idx, num_clients, rng)
    if cfg.kind == "dirichlet":
        return split_dirichlet(idx, y, num_clients, cfg.alpha, cfg.min_size, cfg.cap, rng, max_tries=cfg.max_draws,
                               min_classes=cfg.min_classes, repair=cfg.repair, tally=tally)
    if cfg.kind == "dirichlet_equal":
        return split_dirichlet_equal(idx, y, num_clients, cfg.alpha, rng)
    return split_shards(idx, y, num_clients, cfg.classes_per_client, rng)


# ------------------------------------------------------------------------------------------ domains
def assign_domains(y: np.ndarray, num_clients: int, data_cfg, rng: np.random.Generator,
                   tally: Tally) -> tuple[list[np.ndarray], np.ndarray]:
    """Client training indices and domains, for the configured domain scheme."""
    all_idx = np.arange(len(y))
    dom = data_cfg.domains
    if dom.kind == "none":
        return split_labels(all_idx, y, num_clients, data_cfg.partition, rng, tally), np.zeros(num_clients, dtype=np.int64)
    n_dom = len(dom.angles)
    if dom.assign == "per_client":
        parts = split_labels(all_idx, y, num_clients, data_cfg.partition, rng, tally)
        return parts, np.arange(num_clients) % n_dom
    if num_clients % n_dom:
        raise PartitionError(
            f"data.num_clients = {num_clients}: grouped rotation domains need a multiple of the {n_dom} angles"
        )
    per_domain = num_clients // n_dom
    parts: list[np.ndarray] = []
    for chunk in np.array_split(rng.permutation(all_idx), n_dom):
        parts += split_labels(np.sort(chunk), y, per_domain, data_cfg.partition, rng, tally)
    return parts, np.repeat(np.arange(n_dom), per_domain)


def make_partition(y_train: np.ndarray, data_cfg, seed: int, owners: np.ndarray | None = None) -> Partition:
    """`owners`: each training sample's natural client, which the `natural` kind splits by."""
    rng = np.random.default_rng(seed)
    tally = Tally()
    if data_cfg.partition.kind == "natural":
        from tasks.data.natural import natural_parts

        parts, domain = natural_parts(owners, data_cfg, rng)
    else:
        parts, domain = assign_domains(y_train, data_cfg.num_clients, data_cfg, rng, tally)
    sizes = np.array([len(part) for part in parts], dtype=np.int64)
    shuffled = np.concatenate([rng.permutation(part) for part in parts]).astype(np.int64)
    # a client's first round(|part| · fraction) samples in its shuffled order are its test split
    n_test = np.array([int(round(n * data_cfg.client_test_fraction)) for n in sizes.tolist()], dtype=np.int64)
    client = np.repeat(np.arange(len(parts)), sizes)
    is_train = (np.arange(len(shuffled)) - np.repeat(np.cumsum(sizes) - sizes, sizes)) >= np.repeat(n_test, sizes)
    grouped = group_by(2 * client + is_train, shuffled, 2 * len(parts))  # client c: test at 2c, train at 2c + 1
    return Partition(grouped[1::2], grouped[0::2], domain, tally)


VALIDATION_STREAM = 0x7A1  # the validation split's own random stream, apart from the partition's


def hold_out_validation(partition: Partition, fraction: float, seed: int) -> tuple[Partition, list[np.ndarray]]:
    """Each client's validation split: round(|train| · fraction) of its training samples (at least one left to
    train on), drawn from the seed alone, so every method of a seed holds out the same samples. Returns the
    partition with those samples taken out of the clients' training sets (in their order) and the splits; with
    fraction 0, the partition as it is and empty splits."""
    if fraction == 0:
        return partition, [np.zeros(0, dtype=np.int64) for _ in partition.train]
    rng = np.random.default_rng([seed & 0xFFFFFFFF, VALIDATION_STREAM])
    train, validation = [], []
    for idx in partition.train:
        held = np.zeros(len(idx), dtype=bool)
        held[rng.permutation(len(idx))[:min(int(round(len(idx) * fraction)), max(0, len(idx) - 1))]] = True
        train.append(idx[~held])
        validation.append(idx[held])
    return Partition(train, partition.test, partition.domain, partition.tally), validation


def rotate_images(x: np.ndarray, angle: float) -> np.ndarray:
    """Rotate NCHW images by `angle` degrees about their centre (docs/methods/fedfa.md §11, docs/methods/feddebias.md §10.1)."""
    if angle % 360 == 0:
        return x
    from scipy.ndimage import rotate

    return rotate(x, angle, axes=(2, 3), reshape=False, order=1, mode="constant", cval=0.0).astype(np.float32)


def label_entropy(hist: np.ndarray) -> np.ndarray:
    """Per-client entropy (nats) of the label distribution: lower means more skew."""
    p = hist / np.maximum(hist.sum(axis=1, keepdims=True), 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=1)
