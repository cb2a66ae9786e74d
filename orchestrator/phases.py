"""Where a run's time goes: named phases timed with a monotonic clock, summarised for `mooring run --profile`.

A `Phases` is cheap enough (two clock reads per phase) to be always on. The driver times start-up and
shutdown, the coordinator the parts of each round, and each client actor its own share of a call; the driver
collects them all at the end, so the timing never enters a run's history (which must stay the same run to run).
"""
from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class Phases:
    """Seconds spent per named phase, one entry per time the phase ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = defaultdict(list)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name].append(time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name].append(seconds)

    def merge(self, other: dict[str, list[float]], prefix: str = "") -> None:
        for name, values in other.items():
            self.seconds[prefix + name] += values

    def as_dict(self) -> dict[str, list[float]]:
        return {name: list(values) for name, values in self.seconds.items()}


def profile_table(seconds: dict[str, list[float]]) -> str:
    """One line per phase: how often it ran, its median and its total, in the order the phases were first seen."""
    lines = [f"{'phase':<40} {'count':>6} {'median ms':>10} {'total s':>9}"]
    for name, values in seconds.items():
        if values:
            lines.append(f"{name:<40} {len(values):>6} {1000 * statistics.median(values):>10.2f} {sum(values):>9.3f}")
    return "\n".join(lines)
