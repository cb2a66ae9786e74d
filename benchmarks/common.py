"""What the benchmarks share: the bare loop as a fresh process, a temporary working directory, Ray started
once, the fastest of interleaved runs, and peak memory of a process tree."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = str(REPO / "configs" / "default.yaml")


@contextlib.contextmanager
def temp_workdir(prefix: str = "mooring-bench-") -> Iterator[str]:
    """A temporary directory, also the working directory while the benchmark runs: whatever a run writes
    relative to it (MLflow's ./mlruns artifact root for a SQLite store, partitions, run directories) lands
    there, never in the checkout. Removed afterwards."""
    tmp, before = tempfile.mkdtemp(prefix=prefix), os.getcwd()
    os.chdir(tmp)
    try:
        yield tmp
    finally:
        os.chdir(before)
        shutil.rmtree(tmp, ignore_errors=True)


def store_overrides(tmp: str) -> list[str]:
    """Run directories, partitions and the MLflow store inside `tmp`."""
    return [f"checkpoint.dir={tmp}/runs", f"data.partitions_dir={tmp}/p", f"tracking.uri=sqlite:///{tmp}/mlflow.db"]


@contextlib.contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[None]:
    """A local Ray instance for the benchmark's in-process runs, shut down at the end if this started it."""
    import ray

    from orchestrator.ray_runtime.ray_start import init_ray

    started = not ray.is_initialized()
    if started:
        init_ray(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def child_env() -> dict[str, str]:
    """This checkout first on the path of a child process, so it runs the code being measured."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + path if path else ""), "RAY_AUTH_MODE": "disabled"}


def loop_process(module: str, config: str, overrides: list[str], cwd: str, name: str,
                 options: tuple[str, ...] = ()) -> tuple[dict, float]:
    """`python -m <module> CONFIG --set ... [options]` in a fresh process: (the JSON its last line printed, the whole
    process's seconds); a RuntimeError naming the loop (`name`) and its last error line if it fails."""
    cmd = [sys.executable, "-m", module, config, *(f"--set={o}" for o in overrides), *options]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=child_env(), check=False)
    whole = time.perf_counter() - start
    if out.returncode != 0:
        last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit status {out.returncode}"
        raise RuntimeError(f"the {name} failed: {last}")
    return json.loads(out.stdout.strip().splitlines()[-1]), whole


def bare_loop_process(config: str, overrides: list[str], cwd: str, vectorized: bool = False) -> tuple[float, float]:
    """The efficient plain loop (benchmarks/bare_loop.py), or with `vectorized` the vectorised loop, in a fresh
    process: (its rounds' seconds, the whole process's)."""
    printed, whole = loop_process("benchmarks.bare_loop", config, overrides, cwd, "bare loop", loop_options(vectorized))
    return printed["rounds_seconds"], whole


def bare_loop_rounds(config: str, overrides: list[str], cwd: str, vectorized: bool = False) -> list[float]:
    """As `bare_loop_process`: each round's seconds, after one throwaway round (as Mooring's start-up runs one)."""
    printed, _ = loop_process("benchmarks.bare_loop", config, overrides, cwd, "bare loop",
                              (*loop_options(vectorized), "--warm-up"))
    return printed["round_seconds"]


def loop_options(vectorized: bool) -> tuple[str, ...]:
    """A reference loop's options: the vectorised loop, or the plain one (benchmarks/bare_loop.py's `loop_parser`)."""
    return ("--vectorized",) if vectorized else ()


def reproduce(command: str) -> str:
    return f"Reproduce: `{command}`."


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
