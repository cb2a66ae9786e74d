"""Overhead: Mooring on Ray against a bare single-process PyTorch loop doing exactly the same training.

Digits, 100 clients (Dirichlet α = 0.5 with the N/K cap), 10 per round, 20 rounds, 20 local epochs of
batch 4 (about 13 samples per client, so the local work is not dwarfed by a round's fixed cost). The bare loop is `run_in_process` (same clients, steps,
model and data; no Ray, no tracking, no checkpoints). Mooring runs with 1 and with 2 client actors, MLflow
tracking and checkpoints on; Ray's start-up (ray.init) is reported separately and left out of the ratio.

    python -m benchmarks.overhead            (or: mooring bench overhead)
"""
from __future__ import annotations

import tempfile
import time

from benchmarks.common import bare_loop_seconds, markdown_table

SETTING = ["data.num_clients=100", "train.clients_per_round=10", "train.rounds=20", "train.local_epochs=20",
           "train.batch_size=4",
           "data.partition.alpha=0.5", "data.partition.min_size=4", "data.partition.cap=true",
           "checkpoint.every=5"]


def measure(repeats: int = 1) -> dict:
    import ray
    import torch

    from orchestrator.config import load_config
    from orchestrator.run import run_experiment

    tmp = tempfile.mkdtemp(prefix="mooring-bench-")
    paths = [f"checkpoint.dir={tmp}/runs", f"data.partitions_dir={tmp}/p", f"tracking.uri=sqlite:///{tmp}/mlflow.db"]
    cfg = load_config("configs/default.yaml", SETTING + paths)
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray_start = time.perf_counter() - t0
    out = {"threads_bare": torch.get_num_threads(), "ray_start": ray_start}
    bare, one, two, setup = [], [], [], []
    for _ in range(repeats):
        bare.append(bare_loop_seconds(cfg))
        for n, sink in ((1, one), (2, two)):
            r = run_experiment(load_config("configs/default.yaml", SETTING + paths + [f"resources.num_actors={n}"]),
                               progress=False)
            sink.append(sum(r.round_seconds))
            setup.append(r.wall_seconds - r.startup_seconds - sum(r.round_seconds))
    ray.shutdown()
    out.update(bare=min(bare), one=min(one), two=min(two), setup=max(setup))
    out["ratio_one"] = out["one"] / out["bare"]
    out["speedup_two"] = out["bare"] / out["two"]
    return out


def report(m: dict) -> str:
    rows = [
        ["bare in-process loop", f"{m['bare']:.1f}", "1.00", "floor"],
        ["Mooring, 1 actor", f"{m['one']:.1f}", f"{m['ratio_one']:.2f}", "target ≤ 1.15"],
        ["Mooring, 2 actors", f"{m['two']:.1f}", f"{m['two'] / m['bare']:.2f} (speed-up {m['speedup_two']:.2f}×)",
         "target speed-up ≥ 1.6×"],
    ]
    return (markdown_table(["", "seconds", "× bare loop", ""], rows)
            + f"\n\nRounds only, both sides (Mooring's include its MLflow logging, metrics file and checkpoints). "
              f"Reported apart: Ray start-up (ray.init) {m['ray_start']:.1f} s; a run's own set-up (data into the "
              f"object store, coordinator and actor processes, MLflow run, final artifacts) up to {m['setup']:.1f} s. "
              f"Bare loop torch threads: {m['threads_bare']}; each actor uses 1.\n")


if __name__ == "__main__":
    print(report(measure()))
