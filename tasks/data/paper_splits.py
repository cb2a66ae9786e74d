"""FedFM's two equal-size label skews (docs/methods/fedfm.md §12 names them; the paper's Sec. VII-A and its
authors' code define them), as partition kinds of the `module:function` form (tasks/data/partition_kinds.py):

    data.partition.kind: tasks.data.paper_splits:dominant_classes    # NIID-2
    data.partition.kind: tasks.data.paper_splits:missing_classes     # NIID-3 "Missing x": classes_per_client = C − x

- `dominant_classes` (NIID-2): client i's dominant classes are those c with ⌊c·K/C⌋ = i (class i when K = C; ten
  classes 10i … 10i+9 for CIFAR-100 over 10 clients). Each class gives DOMINANT_SHARE of its samples to its
  dominant client and the rest in equal shares to every other client: 2300 of CIFAR-10's 5000 images of class i
  to client i and 300 to each of the other nine, as the code does; with C = K every client holds the same number.
- `missing_classes` (NIID-3): client i holds the m = classes_per_client classes (i + j) mod C, j < m; every class
  is dealt in equal parts (⌊n_c / holders⌋ samples each, drawn without replacement) to the clients that hold it,
  so with K = C every client holds m·⌊n_c/m⌋ samples and lacks C − m classes.

Both draw only from the request's generator, so a split is reproducible from the run seed.
"""
from __future__ import annotations

import numpy as np

from tasks.data.partition_kinds import SplitRequest

DOMINANT_SHARE = 2300 / 5000  # the code's CIFAR-10 split: 2300 of class i's 5000 images go to client i


def class_pools(request: SplitRequest) -> tuple[np.ndarray, list[np.ndarray]]:
    """The classes present and each one's indices, shuffled by the request's generator."""
    labels = request.labels[request.indices]
    classes = np.unique(labels)
    return classes, [request.rng.permutation(request.indices[labels == c]) for c in classes]


def deal(pool: np.ndarray, shares: np.ndarray) -> list[np.ndarray]:
    """`pool` cut at the cumulative shares (which sum to at most 1), one piece per share."""
    cuts = np.floor(np.cumsum(shares) * len(pool) + 1e-9).astype(int)
    return np.split(pool, cuts)[:len(shares)]


def dominant_classes(request: SplitRequest) -> list[np.ndarray]:
    """NIID-2: each class's DOMINANT_SHARE to its dominant client, the rest equally to the others."""
    k = request.num_clients
    classes, pools = class_pools(request)
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c, pool in zip(classes, pools):
        owner = int(c) * k // (int(classes.max()) + 1)
        shares = np.full(k, (1 - DOMINANT_SHARE) / max(1, k - 1))
        shares[owner] = DOMINANT_SHARE if k > 1 else 1.0
        for client, piece in enumerate(deal(pool, shares)):
            parts[client].append(piece)
    return [np.concatenate(p) if p else np.zeros(0, np.int64) for p in parts]


def missing_classes(request: SplitRequest) -> list[np.ndarray]:
    """NIID-3: client i holds classes (i + j) mod C, j < classes_per_client, each class split equally among its
    holders."""
    k, m = request.num_clients, request.options.classes_per_client
    classes, pools = class_pools(request)
    num_classes = int(classes.max()) + 1
    holders = {c: [i for i in range(k) if (c - i) % num_classes < m] for c in range(num_classes)}
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c, pool in zip(classes, pools):
        owners = holders[int(c)]
        if not owners:
            continue
        each = len(pool) // len(owners)
        for n, client in enumerate(owners):
            parts[client].append(pool[n * each:(n + 1) * each])
    return [np.concatenate(p) if p else np.zeros(0, np.int64) for p in parts]
