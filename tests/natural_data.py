"""Tiny files in the formats the natural datasets read: Gutenberg play texts and LEAF's JSON, for the tests."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

WORDS = "to be or not that is the question whether tis nobler in mind suffer slings and arrows".split()


def speech(rng: np.random.Generator, words: int) -> str:
    return " ".join(rng.choice(WORDS, words))


def write_play(path: Path, roles: dict[str, int], seed: int = 0) -> None:
    """A play in the Gutenberg layout: a title, then speech blocks 'NAME.' + lines, each role `n` speeches."""
    rng = np.random.default_rng(seed)
    blocks = ["THE TRAGEDY OF TESTS\n\nby William Shakespeare", "ACT I.", "Scene I. A room."]
    turns = [name for name, n in roles.items() for _ in range(n)]
    for name in [turns[i] for i in rng.permutation(len(turns))]:
        blocks.append(f"{name}.\n{speech(rng, 6)}\n[Aside.] {speech(rng, 5)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")


def write_leaf(root: Path, name: str, split: str, users: dict[str, tuple[list, list]], file: str = "part_0.json") -> Path:
    """One LEAF JSON file: {users, num_samples, user_data: {user: {x, y}}}."""
    path = root / name / "data" / split / file
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"users": list(users), "num_samples": [len(y) for _, y in users.values()],
           "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()}}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def femnist_users(seed: int, counts: dict[str, int]) -> dict[str, tuple[list, list]]:
    rng = np.random.default_rng(seed)
    return {u: (rng.random((n, 784)).round(3).tolist(), rng.integers(0, 62, n).tolist()) for u, n in counts.items()}
