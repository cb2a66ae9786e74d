"""Overhead: Mooring on Ray against the bare single-process PyTorch loop doing the same training (heavy clients).

Digits, 100 clients (Dirichlet α = 0.5 with the N/K cap), 10 per round, 20 rounds, 20 local epochs of
batch 4 (about 13 samples per client, so the local work is not dwarfed by a round's fixed cost). The floor is
benchmarks/bare_loop.py in a fresh process (one thread, no framework); Mooring's `run_in_process` is a row of
its own, to show how lean it is. Mooring runs with 1 and with 2 client actors, MLflow tracking (a temporary
SQLite store) and checkpoints on; Ray's start-up is left out of the ratio (benchmarks/whole_run.py counts it).
Two bare loops started together in two processes show what the machine itself allows two processes.

    python -m benchmarks.overhead            (or: mooring bench overhead [--engine E])
"""
from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.common import (
    DEFAULT_CONFIG,
    bare_loop_process,
    child_env,
    local_ray,
    markdown_table,
    reproduce,
    store_overrides,
    temp_workdir,
)
from benchmarks.tiny_clients import in_process_rounds

SETTING = ["data.num_clients=100", "train.clients_per_round=10", "train.rounds=20", "train.local_epochs=20",
           "train.batch_size=4", "algorithm.name=fedavg",
           "data.partition.alpha=0.5", "data.partition.min_size=4", "data.partition.cap=true",
           "checkpoint.every=5"]
TARGET_TWO = 0.35  # Mooring with two actors, × the bare loop (issue 13)


def bare_loops_at_once(overrides: list[str], cwd: str, count: int = 2) -> float:
    """`count` bare loops started together, each a fresh process; the slowest one's rounds. With count = 2:
    what this machine gives two busy processes (two vCPUs of a shared host rarely make two full cores)."""
    cmd = [sys.executable, "-m", "benchmarks.bare_loop", DEFAULT_CONFIG, *(f"--set={o}" for o in overrides)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=cwd, env=child_env()) for _ in range(count)]
    return max(json.loads(p.communicate()[0].strip().splitlines()[-1])["rounds_seconds"] for p in procs)


def measure(repeats: int = 5, engine: str | None = None, mooring_overrides: tuple[str, ...] = ()) -> dict:
    """Each row's fastest of `repeats` interleaved runs (the machine is shared: the minimum is the least
    disturbed). `mooring_overrides` apply to the Mooring rows only."""
    from orchestrator.driver.run import run_experiment
    from orchestrator.experiment.config import load_config

    engine_override = ([f"train.engine={engine}"] if engine else []) + list(mooring_overrides)
    out: dict = {"repeats": repeats, "engine": engine,
                 "command": f"mooring bench overhead --repeats {repeats}" + (f" --engine {engine}" if engine else "")
                            + "".join(f" --set {o}" for o in mooring_overrides)}
    bare, in_process, one, two, setup, pair = [], [], [], [], [], []
    with temp_workdir() as tmp, local_ray():
        base = SETTING + store_overrides(tmp)
        for _ in range(repeats):
            bare.append(bare_loop_process(DEFAULT_CONFIG, base, tmp)[0])
            in_process.append(sum(in_process_rounds(load_config(DEFAULT_CONFIG, base))))
            pair.append(bare_loops_at_once(base, tmp))
            for n, sink in ((1, one), (2, two)):
                r = run_experiment(load_config(DEFAULT_CONFIG, base + engine_override + [f"resources.num_actors={n}"]),
                                   progress=False)
                sink.append(sum(r.round_seconds))
                setup.append(r.wall_seconds - r.startup_seconds - sum(r.round_seconds))
    out.update(bare=min(bare), in_process=min(in_process), one=min(one), two=min(two), setup=max(setup),
               pair=min(pair))
    out["ceiling"] = 2 * out["bare"] / out["pair"]  # the work of two bare loops in the time of `pair`
    return out


def report(m: dict) -> str:
    engine = f", engine {m['engine']}" if m["engine"] else ""
    rows = [
        ["efficient plain loop (fresh process, 1 thread)", f"{m['bare']:.2f}", "1.00", "floor"],
        ["Mooring's run_in_process (1 thread, no Ray)", f"{m['in_process']:.2f}", f"{m['in_process'] / m['bare']:.2f}", ""],
        [f"Mooring, 1 actor{engine}", f"{m['one']:.2f}", f"{m['one'] / m['bare']:.2f}", ""],
        [f"Mooring, 2 actors{engine}", f"{m['two']:.2f}", f"{m['two'] / m['bare']:.2f}", f"target ≤ {TARGET_TWO}"],
        ["two plain loops at once, two processes (the machine's ceiling)", f"{m['pair']:.2f} each",
         f"{m['pair'] / m['bare']:.2f}", f"at most {m['ceiling']:.2f}× from two processes"],
    ]
    return (markdown_table(["", "rounds' seconds", "× plain loop", ""], rows)
            + f"\n\nRounds only, both sides (Mooring's include its MLflow logging, metrics file and checkpoints); "
              f"each the fastest of {m['repeats']} interleaved runs. A run's own set-up and end (data, actors, MLflow "
              f"run, final artifacts; Ray's start excluded) took up to {m['setup']:.1f} s. "
            + reproduce(m["command"]) + "\n")


if __name__ == "__main__":
    print(report(measure()))
