"""A whole `mooring run`, start-up and shutdown included, against the efficient plain loop's whole process.

The tiny-client workload (benchmarks/tiny_clients.py) at 100 clients with 10 per round by default, two client
actors asked for (resources.clients_on: auto may train so small a round in the coordinator instead; the row
says where they trained), MLflow tracking (a temporary SQLite store) and checkpoints on, as a newcomer's
`mooring run` would: a fresh process from launch to exit (imports, Ray's start, the data, the actors, 20
rounds, the artifacts, Ray's shutdown). The floor is benchmarks/bare_loop.py as a fresh process from launch to
exit (imports, data and partition, 20 rounds). Each side the fastest of `repeats` interleaved runs.

    python -m benchmarks.whole_run           (or: mooring bench whole-run [--size 100/10] [--engine E])
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import (
    DEFAULT_CONFIG,
    bare_loop_process,
    child_env,
    markdown_table,
    reproduce,
    store_overrides,
    temp_workdir,
)
from benchmarks.tiny_clients import workload

TARGET = 1.5  # × the efficient plain loop's whole process (issue 23)


def mooring_run_seconds(overrides: list[str], cwd: str) -> float:
    """`mooring run` as a fresh process, launch to exit."""
    cmd = [sys.executable, "-m", "orchestrator.cli", "run", DEFAULT_CONFIG, "--quiet", *(f"--set={o}" for o in overrides)]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=child_env(), check=False)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"mooring run failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
    return seconds


def where_clients_trained(tmp: str) -> str:
    """The row label's note where the last run's clients trained in the coordinator (its actors.json)."""
    from benchmarks.tiny_clients import where_clients_trained as note

    runs = sorted(Path(tmp, "runs").glob("*/actors.json"), key=lambda p: p.stat().st_mtime)
    return note(str(runs[-1].parent)) if runs else ""


def measure(size: str = "100/10", rounds: int = 20, repeats: int = 3, actors: int = 2, engine: str | None = None,
            mooring_overrides: tuple[str, ...] = ()) -> dict:
    """`mooring_overrides` apply to the `mooring run` only (resources.partial_sums=true, for example)."""
    out = {"size": size, "rounds": rounds, "repeats": repeats, "actors": actors, "engine": engine,
           "command": f"mooring bench whole-run --size {size} --rounds {rounds} --repeats {repeats} --actors {actors}"
                      + (f" --engine {engine}" if engine else "") + "".join(f" --set {o}" for o in mooring_overrides)}
    bare_whole, bare_rounds, mooring = [], [], []
    with temp_workdir() as tmp:
        base = workload(size, rounds) + store_overrides(tmp)
        run_overrides = base + [f"resources.num_actors={actors}"] + ([f"train.engine={engine}"] if engine else []) \
            + list(mooring_overrides)
        for _ in range(repeats):
            rounds_s, whole_s = bare_loop_process(DEFAULT_CONFIG, base, tmp)
            bare_rounds.append(rounds_s)
            bare_whole.append(whole_s)
            mooring.append(mooring_run_seconds(run_overrides, tmp))
        out["where"] = where_clients_trained(tmp)
    out.update(bare=min(bare_whole), bare_rounds=min(bare_rounds), mooring=min(mooring))
    out["ratio"] = out["mooring"] / out["bare"]
    return out


def report(m: dict) -> str:
    clients, per_round = m["size"].split("/")
    engine = f", engine {m['engine']}" if m["engine"] else ""
    rows = [["efficient plain loop, whole process", f"{m['bare']:.1f}", "1.00", f"of which rounds {m['bare_rounds']:.1f} s"],
            [f"`mooring run`, {m['actors']} actor{'s' if m['actors'] > 1 else ''}{engine}{m['where']}, whole process",
             f"{m['mooring']:.1f}", f"{m['ratio']:.2f}",
             f"target ≤ {TARGET:g}"]]
    return (f"{clients} clients, {per_round} per round, {m['rounds']} rounds, launch to exit:\n\n"
            + markdown_table(["", "seconds", "× plain loop", ""], rows)
            + f"\n\nEach the fastest of {m['repeats']} interleaved runs. " + reproduce(m["command"]) + "\n")


if __name__ == "__main__":
    print(report(measure()))
