"""LEAF's JSON layout (github.com/TalwalkarLab/leaf, as its preprocessing scripts write it), read from `data.root`.

`<root>/<femnist|shakespeare|sent140>/data/{train,test}/*.json`, each file
`{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}`. Every user is a natural
client (`data.partition.kind: natural`); a user's test samples go to the global test set.

- leaf_femnist: x a list of 784 pixel values in [0, 1] (a 28×28 image, row by row), y a class 0..61;
- leaf_shakespeare: x a string of characters, y the next character (LEAF's 80 letters, tasks/data/text.py);
- leaf_sent140: x a tweet's record whose last field is its text (or the text alone), y 0 or 1; the text is read
  as its first `data.text.seq_len` characters (LEAF's reference model embeds words with GloVe, which needs a
  download; this reads the same files with the character model).

Files are read as data (json), each checked as it is read: a file that is not JSON (truncated, damaged, nested too
deep), lacks a key, gives a user of its split a second time, or whose sample counts, shapes or labels do not match is
refused in one line naming it. A user with no samples in a split (num_samples 0) is read as one with none. LEAF's files come
from its own preprocessing of the raw sets, not from a download, so `data.download` does not apply.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tasks.data.dataset_types import DATASETS, ArrayDataset, DataFileError, DatasetNotFound
from tasks.data.text import LETTERS, VOCAB_SIZE, encode_fixed
from tasks.json_data import JsonProblem, parse_json

FEMNIST_CLASSES, FEMNIST_PIXELS = 62, 28 * 28


@dataclass
class Users:
    """Samples of one split, user by user; `ids` maps a user's name to its owner id across both splits, `files`
    the file of the split that gave each user (a user's samples of a split are in one file, once)."""

    ids: dict[str, int]
    x: list[np.ndarray] = field(default_factory=list)
    y: list[np.ndarray] = field(default_factory=list)
    owner: list[np.ndarray] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)


def split_files(root: Path, name: str, split: str) -> list[Path]:
    directory = root / name / "data" / split
    files = sorted(directory.glob("*.json"))
    if not files:
        raise DatasetNotFound(f"leaf_{name}: no LEAF files in {directory}; expected *.json written by LEAF's "
                              f"preprocessing (github.com/TalwalkarLab/leaf, data/{name})")
    return files


def read_json(path: Path) -> dict:
    try:
        doc = parse_json(path.read_bytes())
    except JsonProblem as e:
        raise DataFileError(f"{path}: not a LEAF JSON file (truncated or damaged: {e})") from None
    if not isinstance(doc, dict) or not all(key in doc for key in ("users", "num_samples", "user_data")):
        raise DataFileError(f"{path}: not a LEAF JSON file: it needs the keys users, num_samples and user_data")
    if not isinstance(doc["users"], list) or not isinstance(doc["user_data"], dict):
        raise DataFileError(f"{path}: users must be a list and user_data a mapping")
    if not all(isinstance(user, str) for user in doc["users"]):
        raise DataFileError(f"{path}: users must be a list of names (strings)")
    counts = doc["num_samples"]
    if not isinstance(counts, list) or not all(type(n) is int and n >= 0 for n in counts):
        raise DataFileError(f"{path}: num_samples must be a list of sample counts (0, 1, 2, ...), one per user")
    if len(counts) != len(doc["users"]):
        raise DataFileError(f"{path}: {len(counts)} num_samples for {len(doc['users'])} users")
    return doc


def read_users(path: Path, users: Users, parse: Callable[[Path, str, list, list], tuple[np.ndarray, np.ndarray]]) -> None:
    """Every user of one file into `users`, its x and y parsed by `parse` (which raises DataFileError)."""
    doc = read_json(path)
    for user, count in zip(doc["users"], doc["num_samples"]):
        claim_user(path, user, users.files)
        record = doc["user_data"].get(user)
        if not isinstance(record, dict) or not isinstance(record.get("x"), list) or not isinstance(record.get("y"), list):
            raise DataFileError(f"{path}: user {user!r} has no x and y lists in user_data")
        if not len(record["x"]) == len(record["y"]) == count:
            raise DataFileError(f"{path}: user {user!r}: num_samples says {count}, x has {len(record['x'])} and "
                                f"y {len(record['y'])}")
        x, y = parse(path, user, record["x"], record["y"])
        owner = users.ids.setdefault(user, len(users.ids))
        users.x.append(x)
        users.y.append(y)
        users.owner.append(np.full(len(y), owner, dtype=np.int64))


def claim_user(path: Path, user: str, files: dict[str, Path]) -> None:
    """Record that `path` gives `user`'s samples of its split; a second time is refused (it would double them)."""
    if user in files:
        where = "is listed twice" if files[user] == path else f"is already in {files[user]}"
        raise DataFileError(f"{path}: user {user!r} {where}; a user's samples of a split are in one place")
    files[user] = path


def checked_labels(path: Path, user: str, y: list, num_classes: int) -> np.ndarray:
    labels = np.asarray(y) if all(type(label) is int for label in y) else None
    if labels is None or (len(labels) and (labels.min() < 0 or labels.max() >= num_classes)):
        raise DataFileError(f"{path}: user {user!r}: labels must be integers 0..{num_classes - 1}, one per sample")
    return labels.astype(np.int64)


def femnist_samples(path: Path, user: str, x: list, y: list) -> tuple[np.ndarray, np.ndarray]:
    try:
        pixels = np.asarray(x, dtype=np.float32).reshape(len(x), -1 if x else FEMNIST_PIXELS)
    except (ValueError, TypeError):
        pixels = None
    if pixels is None or (len(x) and pixels.shape[1] != FEMNIST_PIXELS):
        raise DataFileError(f"{path}: user {user!r}: every x must be {FEMNIST_PIXELS} numbers (a 28×28 image)")
    if len(x) and (not np.isfinite(pixels).all() or pixels.min() < 0 or pixels.max() > 1):
        raise DataFileError(f"{path}: user {user!r}: pixel values must lie in [0, 1]")
    return pixels.reshape(len(x), 1, 28, 28), checked_labels(path, user, y, FEMNIST_CLASSES)


def character_samples(seq_len: int) -> Callable:
    def parse(path: Path, user: str, x: list, y: list) -> tuple[np.ndarray, np.ndarray]:
        if not all(isinstance(s, str) for s in x) or not all(isinstance(c, str) and len(c) == 1 for c in y):
            raise DataFileError(f"{path}: user {user!r}: x must be strings and y single characters")
        ids = np.stack([encode_fixed(s, seq_len) for s in x]) if x else np.zeros((0, seq_len), np.int64)
        return ids, np.asarray([max(LETTERS.find(c), LETTERS.index(" ")) for c in y], dtype=np.int64)
    return parse


def tweet_samples(seq_len: int) -> Callable:
    def parse(path: Path, user: str, x: list, y: list) -> tuple[np.ndarray, np.ndarray]:
        texts = [record[-1] if isinstance(record, list) and record else record for record in x]
        if not all(isinstance(t, str) for t in texts):
            raise DataFileError(f"{path}: user {user!r}: every x must be a tweet's text or a record ending in it")
        ids = np.stack([encode_fixed(t, seq_len) for t in texts]) if x else np.zeros((0, seq_len), np.int64)
        return ids, checked_labels(path, user, y, 2)
    return parse


def load_leaf(name: str, opts, parse: Callable, num_classes: int) -> ArrayDataset:
    root = Path(os.path.abspath(os.path.expanduser(opts.root)))
    ids: dict[str, int] = {}
    splits = []
    for split in ("train", "test"):
        users = Users(ids)
        for path in split_files(root, name, split):
            read_users(path, users, parse)
        if not users.y:
            raise DataFileError(f"{root / name / 'data' / split}: its files hold no users")
        splits.append([np.concatenate(part) for part in (users.x, users.y, users.owner)])
    (x_train, y_train, owners), (x_test, y_test, test_owners) = splits
    return ArrayDataset(f"leaf_{name}", x_train, y_train, x_test, y_test, num_classes,
                        owners=owners, test_owners=test_owners, owner_names=list(ids))


@DATASETS.register("leaf_femnist")
def load_leaf_femnist(opts) -> ArrayDataset:
    return load_leaf("femnist", opts, femnist_samples, FEMNIST_CLASSES)


@DATASETS.register("leaf_shakespeare")
def load_leaf_shakespeare(opts) -> ArrayDataset:
    return load_leaf("shakespeare", opts, character_samples(opts.text.seq_len), VOCAB_SIZE)


@DATASETS.register("leaf_sent140")
def load_leaf_sent140(opts) -> ArrayDataset:
    return load_leaf("sent140", opts, tweet_samples(opts.text.seq_len), 2)
