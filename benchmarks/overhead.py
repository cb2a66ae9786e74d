"""Overhead: Mooring on Ray against a bare single-process PyTorch loop doing exactly the same training.

Digits, 100 clients (Dirichlet α = 0.5 with the N/K cap), 10 per round, 20 rounds, 20 local epochs of
batch 4 (about 13 samples per client, so the local work is not dwarfed by a round's fixed cost). The bare
loop is `run_in_process` (same clients, steps, model and data; no Ray, no tracking, no checkpoints), run in a
fresh process with 1 and with 2 intra-op threads, the faster counting. Mooring runs with 1 and with 2 client
actors, MLflow tracking and checkpoints on; Ray's start-up (ray.init) is reported separately and left out of
the ratio. Two bare loops started together in two processes show what the machine itself allows two
processes.

    python -m benchmarks.overhead            (or: mooring bench overhead)
"""
from __future__ import annotations

import multiprocessing
import tempfile
import time

from benchmarks.common import bare_loop_seconds, markdown_table

SETTING = ["data.num_clients=100", "train.clients_per_round=10", "train.rounds=20", "train.local_epochs=20",
           "train.batch_size=4",
           "data.partition.alpha=0.5", "data.partition.min_size=4", "data.partition.cap=true",
           "checkpoint.every=5"]


def _bare_loop_in_child(cfg, threads: int, start, results) -> None:
    import torch

    torch.set_num_threads(threads)
    import torch._dynamo  # noqa: F401 - warm before the barrier, as bare_loop_seconds would

    start.wait()
    results.put(bare_loop_seconds(cfg))


def bare_loops_at_once(cfg, threads: int, count: int) -> float:
    """`count` bare loops started together, each in a fresh process of its own (no Ray in it); the slowest
    one's seconds. With count = 2: what this machine gives two busy processes (two vCPUs of a shared host
    rarely make two full cores)."""
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(count), ctx.Queue()
    workers = [ctx.Process(target=_bare_loop_in_child, args=(cfg, threads, start, results)) for _ in range(count)]
    for w in workers:
        w.start()
    times = [results.get() for _ in workers]
    for w in workers:
        w.join()
    return max(times)


def fastest_bare_loop(cfg) -> tuple[float, int]:
    """The floor at its best: the bare loop with 1 and with 2 intra-op threads (tiny batches can run slower
    on two), the faster of the two."""
    return min((bare_loops_at_once(cfg, threads, count=1), threads) for threads in (1, 2))


def measure(repeats: int = 5) -> dict:
    """Each side's fastest of `repeats` interleaved runs (the machine is shared: the minimum is the least
    disturbed)."""
    import ray

    from orchestrator.config import load_config
    from orchestrator.run import init_ray, run_experiment

    tmp = tempfile.mkdtemp(prefix="mooring-bench-")
    paths = [f"checkpoint.dir={tmp}/runs", f"data.partitions_dir={tmp}/p", f"tracking.uri=sqlite:///{tmp}/mlflow.db"]
    cfg = load_config("configs/default.yaml", SETTING + paths)
    t0 = time.perf_counter()
    init_ray(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray_start = time.perf_counter() - t0
    out = {"ray_start": ray_start}
    bare, one, two, setup, pair = [], [], [], [], []
    for _ in range(repeats):
        bare.append(fastest_bare_loop(cfg))
        pair.append(bare_loops_at_once(cfg, threads=1, count=2))
        for n, sink in ((1, one), (2, two)):
            r = run_experiment(load_config("configs/default.yaml", SETTING + paths + [f"resources.num_actors={n}"]),
                               progress=False)
            sink.append(sum(r.round_seconds))
            setup.append(r.wall_seconds - r.startup_seconds - sum(r.round_seconds))
    ray.shutdown()
    (out["bare"], out["threads_bare"]), out["repeats"] = min(bare), repeats
    out.update(one=min(one), two=min(two), setup=max(setup))
    out["ratio_one"] = out["one"] / out["bare"]
    out["speedup_two"] = out["bare"] / out["two"]
    out["pair"] = min(pair)
    out["ceiling"] = 2 * out["bare"] / out["pair"]  # the work of two bare loops in the time of `pair`
    return out


def report(m: dict) -> str:
    rows = [
        ["bare in-process loop", f"{m['bare']:.1f}", "1.00", "floor"],
        ["Mooring, 1 actor", f"{m['one']:.1f}", f"{m['ratio_one']:.2f}", "target ≤ 1.15"],
        ["Mooring, 2 actors", f"{m['two']:.1f}", f"{m['two'] / m['bare']:.2f} (speed-up {m['speedup_two']:.2f}×)",
         "target speed-up ≥ 1.6×"],
        ["two bare loops at once, two processes (the machine's ceiling)", f"{m['pair']:.1f} each",
         f"{m['pair'] / m['bare']:.2f}", f"at most {m['ceiling']:.2f}× from two processes"],
    ]
    return (markdown_table(["", "seconds", "× bare loop", ""], rows)
            + f"\n\nRounds only, both sides (Mooring's include its MLflow logging, metrics file and checkpoints); "
              f"each the fastest of {m['repeats']} interleaved runs. "
              f"Reported apart: Ray start-up (ray.init) {m['ray_start']:.1f} s; a run's own set-up (data into the "
              f"object store, coordinator and actor processes, MLflow run, final artifacts) up to {m['setup']:.1f} s. "
              f"The bare loop's faster thread count (1 or 2 tried): {m['threads_bare']}; each actor uses 1.\n")


if __name__ == "__main__":
    print(report(measure()))
