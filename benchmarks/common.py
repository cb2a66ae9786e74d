"""What the benchmarks share: timing the bare in-process loop, and peak memory of a process tree."""
from __future__ import annotations

import threading
import time

import psutil


def bare_loop_seconds(cfg) -> float:
    """The floor: the same clients, steps, model and data, serially in this process, no Ray, no tracking.
    Only the rounds are timed (data loading and model building are set-up, as they are for Mooring)."""
    import torch._dynamo  # noqa: F401 - imported by the first optimizer; a client actor imports it at start-up

    from orchestrator.datasets import prepare_data
    from orchestrator.federation import run_in_process

    stamps: list[float] = []
    data = prepare_data(cfg)
    t0 = time.perf_counter()
    run_in_process(cfg, data, on_round=lambda m: stamps.append(time.perf_counter()))
    return stamps[-1] - t0


class PeakMemory:
    """Samples the summed memory of this process and every descendant (Ray's workers, raylet, GCS).

    PSS (proportional set size) splits each shared page among the processes that map it, so the sum is
    the memory the process tree really holds; summed RSS would count torch's shared libraries once per
    process. Both peaks are kept."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.peak, self.peak_rss, self._stop = interval, 0, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            pss = rss = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    info = p.memory_full_info()
                    pss, rss = pss + info.pss, rss + info.rss
                except psutil.Error:
                    pass
            self.peak, self.peak_rss = max(self.peak, pss), max(self.peak_rss, rss)
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
