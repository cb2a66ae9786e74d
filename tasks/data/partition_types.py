"""What a partition is: each client's training and test rows and its domain (`Partition`, stored as a Parquet
table), how it came about (`Tally`), and the one error a partition raises. The splits that make one are in
tasks/data/partition.py (built-in kinds), tasks/data/partition_kinds.py (a kind of one's own) and
tasks/data/natural.py (the dataset's own owners); they all import this module, which imports nothing of Mooring."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class PartitionError(Exception):
    """A partition that cannot be made or read back, in one line."""


@dataclass
class Tally:
    """How a partition came about: Dirichlet draws made and samples the repair step moved (over all domains)."""

    draws: int = 0
    moved: int = 0

    def describe(self) -> str:
        return f"{self.draws} Dirichlet draws, {self.moved} samples moved by the repair"

    def as_tags(self) -> dict[str, str]:
        return {"partition_draws": str(self.draws), "partition_moved": str(self.moved)}


@dataclass
class Partition:
    train: list[np.ndarray]  # per client: indices into the dataset's training set
    test: list[np.ndarray]  # per client: its own held-out indices (also from the training set)
    domain: np.ndarray  # per client: index into the rotation angles (0 without domains)
    tally: Tally | None = None  # None for a partition stored before tallies were recorded
    # content_hash(), taken once: a partition is not changed after it is made or loaded (stored, then verified
    # on reload, then named in the run's tags, it would otherwise be hashed twice)
    _content_hash: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def num_clients(self) -> int:
        return len(self.train)

    def _segments(self) -> tuple[np.ndarray, np.ndarray]:
        """Every client's train indices then its test indices, end to end (int64), and the (clients, 2) sizes."""
        sizes = np.array([[len(tr), len(te)] for tr, te in zip(self.train, self.test)], dtype=np.int64).reshape(-1, 2)
        flat = [part for pair in zip(self.train, self.test) for part in pair]
        return (np.concatenate(flat).astype(np.int64) if flat else np.zeros(0, np.int64)), sizes

    def __getstate__(self) -> dict:
        """Pickled (into Ray's object store) as flat arrays: 200,000 small arrays take seconds one by one."""
        flat, sizes = self._segments()
        return {"flat": flat, "sizes": sizes, "domain": self.domain, "tally": self.tally}

    def __setstate__(self, state: dict) -> None:
        parts = cut(state["flat"], state["sizes"].ravel())
        self.train, self.test, self.domain, self.tally = parts[0::2], parts[1::2], state["domain"], state["tally"]

    def to_table(self) -> pa.Table:
        sample, sizes = self._segments()
        client = np.repeat(np.arange(self.num_clients, dtype=np.int32), sizes.sum(axis=1))
        is_test = np.repeat(np.tile(np.array([0, 1], np.int8), self.num_clients), sizes.ravel())
        split = pa.DictionaryArray.from_arrays(pa.array(is_test), pa.array(["train", "test"])).cast(pa.string())
        table = pa.table({"client": client, "sample": sample, "split": split,
                          "domain": self.domain[client].astype(np.int16)})
        if self.tally is not None:
            table = table.replace_schema_metadata({"draws": str(self.tally.draws), "moved": str(self.tally.moved)})
        return table

    @classmethod
    def from_table(cls, table: pa.Table, num_clients: int) -> Partition:
        client = table["client"].to_numpy().astype(np.int64)
        is_test = pc.equal(table["split"], "test").to_numpy(zero_copy_only=False)
        domain = np.zeros(num_clients, dtype=np.int64)
        domain[client] = table["domain"].to_numpy()
        parts = group_by(2 * client + is_test, table["sample"].to_numpy(), 2 * num_clients)  # train 2c, test 2c + 1
        meta = table.schema.metadata or {}
        tally = Tally(int(meta[b"draws"]), int(meta[b"moved"])) if b"draws" in meta else None
        return cls(parts[0::2], parts[1::2], domain, tally)

    def content_hash(self) -> str:
        """sha256 of each client's train, test and domain as int64 bytes, each followed by b"|" (in one pass)."""
        if self._content_hash is None:
            self._content_hash = self._hash_segments()
        return self._content_hash

    def _hash_segments(self) -> str:
        flat, sizes = self._segments()
        values = np.insert(flat, np.cumsum(sizes.sum(axis=1)), np.asarray(self.domain, dtype=np.int64))
        segment_sizes = np.concatenate([sizes, np.ones((len(sizes), 1), np.int64)], axis=1).ravel()
        stream = np.insert(values.view(np.uint8), 8 * np.cumsum(segment_sizes), ord("|"))
        return hashlib.sha256(stream.tobytes()).hexdigest()[:16]

    def class_histogram(self, y: np.ndarray, num_classes: int) -> np.ndarray:
        """(clients, classes) counts of each client's training samples."""
        sizes = np.array([len(idx) for idx in self.train], dtype=np.int64)
        flat = np.concatenate(self.train).astype(np.int64) if self.train else np.zeros(0, np.int64)
        cells = np.repeat(np.arange(len(sizes)), sizes) * num_classes + y[flat]
        return np.bincount(cells, minlength=len(sizes) * num_classes).reshape(len(sizes), num_classes)


def group_by(keys: np.ndarray, values: np.ndarray, num_groups: int) -> list[np.ndarray]:
    """values[keys == g], sorted, for every g in 0..num_groups−1 (values ≥ 0): one sort, not a mask per group."""
    width = int(values.max()) + 1 if len(values) else 1
    ordered = np.sort(keys.astype(np.int64) * width + values) % width
    return cut(ordered, np.bincount(keys, minlength=num_groups)[:num_groups])


def cut(flat: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
    """`flat` cut into consecutive pieces of these sizes (views; np.split is slow for 100,000s of pieces)."""
    ends = np.cumsum(sizes).tolist()
    return [flat[start:end] for start, end in zip([0, *ends[:-1]], ends)]
