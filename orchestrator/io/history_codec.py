"""A run's history as its checkpoints hold it: one JSON line per round, each round encoded once, so a checkpoint
pickles one string rather than every metric of every round before it (torch.save's pickler handles each object
in Python: at a few thousand rounds that was most of a tiny round's time; benchmarks/README.md, "Fixed cost").

A history with a value JSON would not give back as it was (a tuple, a non-string key, a NumPy number) is kept as
the list it is, as checkpoints of earlier versions hold it; `decoded` reads either."""
from __future__ import annotations

import json
from typing import Any


def exact_in_json(value: Any) -> bool:
    """Whether json.loads(json.dumps(value)) gives `value` back as it is (NaN and infinities included)."""
    if value is None or type(value) in (str, int, float, bool):
        return True
    if type(value) is list:
        return all(exact_in_json(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and exact_in_json(v) for k, v in value.items())
    return False


class HistoryText:
    """The JSON lines of a growing history, each round's encoded when first asked for."""

    def __init__(self):
        self.lines: list[str] = []
        self.exact = True

    def of(self, history: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
        """`history` as a checkpoint holds it: JSON lines, or a copy of the list where a round is not exact in JSON.
        `history` must extend the one asked for before (a restored run starts a new HistoryText)."""
        for metrics in history[len(self.lines):] if self.exact else []:
            if not exact_in_json(metrics):
                self.exact, self.lines = False, []
                break
            self.lines.append(json.dumps(metrics))
        return "\n".join(self.lines) if self.exact else list(history)


def decoded(held: str | list) -> list[dict[str, Any]]:
    """The history a checkpoint holds (`HistoryText.of`), as a list; ValueError where its text is not JSON lines."""
    if isinstance(held, list):
        return list(held)
    if not isinstance(held, str):
        raise ValueError(f"a history is JSON lines or a list, not {type(held).__name__}")
    history = [json.loads(line) for line in held.splitlines()]
    if not all(isinstance(m, dict) for m in history):
        raise ValueError("a round of the history is not a JSON object")
    return history
