"""Scale: 1,000 clients with 100 per round, against 100 clients with the same 100 per round.

Peak memory of every process together (the driver, Ray's GCS and raylet, the coordinator and the client
actors; summed PSS) must stay under 3 GB, and the time per round must depend on the clients per round,
not on the total. Synthetic 8×8 images (20 per client), IID, the digits MLP, 1 local epoch.

    python -m benchmarks.scale [--algorithm fedavg] [--algorithm fedsa]        (or: mooring bench scale)

`--partitions`: partitions at scale instead. Building, hashing, storing (Parquet, through orchestrator.storage),
reloading and pickling (to bytes and back, as into Ray's object store) a partition of 100,000 clients with 20
samples each, against 10,000 clients with 20 each (the baseline: a ratio of 10 is linear in the data), and
generating the synthetic dataset (25 samples per client, 8×8) that holds them; each in a fresh process, whose
peak RSS above its imports is the memory it cost.

    python -m benchmarks.scale --partitions
"""
from __future__ import annotations

import argparse
import json
import pickle
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common import DEFAULT_CONFIG, PeakMemory, child_env, markdown_table

GB, MB = 1024**3, 1024**2


def setting(total_clients: int, algorithm: str, tmp: str) -> list[str]:
    return [
        "data.dataset=synthetic", f"data.synthetic.num_samples={total_clients * 25}", "data.test_fraction=0.2",
        f"data.num_clients={total_clients}", "data.partition.kind=iid", "data.client_test_fraction=0.2",
        "train.clients_per_round=100", "train.rounds=6", "train.local_epochs=1", "train.batch_size=20",
        "eval.every=100", "checkpoint.every=0", f"algorithm.name={algorithm}",
        f"checkpoint.dir={tmp}/runs", f"data.partitions_dir={tmp}/p", f"tracking.uri=sqlite:///{tmp}/mlflow.db",
    ]


ALGORITHMS = ("fedavg", "fedsa")  # shared models; private heterogeneous models kept for every client


def measure(algorithms: tuple[str, ...] = ALGORITHMS) -> list[dict]:
    return [measure_one(algorithm) for algorithm in algorithms]


def measure_one(algorithm: str) -> dict:
    import ray

    from orchestrator.config import load_config
    from orchestrator.run import init_ray, run_experiment

    tmp = tempfile.mkdtemp(prefix="mooring-scale-")
    out = {"algorithm": algorithm}
    with PeakMemory() as mem:
        init_ray(num_cpus=2, include_dashboard=False, log_to_driver=False)
        for total in (100, 1000):
            result = run_experiment(load_config("configs/default.yaml", setting(total, algorithm, tmp)), progress=False)
            # the first round pays for lazy client-state creation; the rest are steady state
            out[f"round_s_{total}"] = statistics.median(result.round_seconds[1:])
        ray.shutdown()
    out["peak_pss_gb"], out["peak_rss_gb"] = mem.peak / GB, mem.peak_rss / GB
    out["ratio"] = out["round_s_1000"] / out["round_s_100"]
    return out


def report(measured: list[dict]) -> str:
    rows = [[m["algorithm"], f"{m['round_s_100']:.2f}", f"{m['round_s_1000']:.2f}", f"{m['ratio']:.2f}",
             f"{m['peak_pss_gb']:.2f}", f"{m['peak_rss_gb']:.2f}"] for m in measured]
    return markdown_table(["algorithm", "s/round, 100 clients", "s/round, 1,000 clients", "ratio (target ≈ 1)",
                           "peak memory GB, PSS (target < 3)", "summed RSS GB"], rows) + "\n"


# ------------------------------------------------------------------------------------ partitions at scale
PARTITION_CLIENTS = (10_000, 100_000)  # the first is the baseline
PARTITION_KINDS = ("dirichlet", "iid", "synthetic data")
SAMPLES_PER_CLIENT = 20


def measure_partitions() -> list[dict]:
    return [partition_process(clients, kind) for kind in PARTITION_KINDS for clients in PARTITION_CLIENTS]


def partition_process(clients: int, kind: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="mooring-partitions-") as tmp:
        cmd = [sys.executable, "-m", "benchmarks.scale", "--partition-child", str(clients), kind, tmp]
        out = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{kind}, {clients} clients: {out.stderr.strip()[-500:]}")
    return {"clients": clients, "kind": kind, **json.loads(out.stdout.strip().splitlines()[-1])}


def partition_child(clients: int, kind: str, tmp: str) -> dict:
    """One measurement in this (fresh) process: seconds per step, and peak RSS above what the same steps for
    10 clients (run first, so lazy imports and first-call costs are not counted) left."""
    import resource

    import psutil

    partition_steps(10, kind, tmp, {})
    base_rss, seconds = psutil.Process().memory_info().rss, {}
    size = partition_steps(clients, kind, tmp, seconds)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"seconds": seconds, "peak_mb": (peak - base_rss) / MB, "data_mb": size / MB}


def partition_steps(clients: int, kind: str, tmp: str, seconds: dict) -> int:
    """Make the synthetic data, or build, hash, store and load a partition; fills `seconds` per step and
    returns the bytes of the data (the images, or the labels partitioned)."""
    import numpy as np

    from orchestrator.config import load_config
    from orchestrator.datasets import load_partition, store_partition
    from tasks.data.datasets import load_dataset
    from tasks.data.partition import make_partition

    def timed(step, fn, *args):
        start = time.perf_counter()
        result = fn(*args)
        seconds[step] = time.perf_counter() - start
        return result

    if kind == "synthetic data":
        cfg = load_config(DEFAULT_CONFIG, ["data.dataset=synthetic", "data.test_fraction=0.2",
                                           f"data.synthetic.num_samples={25 * clients}"])
        data = timed("generate", load_dataset, cfg.data.model_copy(update={"split_seed": 0}))
        return data.x_train.nbytes + data.x_test.nbytes
    y = np.random.default_rng(0).permutation(np.arange(SAMPLES_PER_CLIENT * clients) % 10)
    cfg = load_config(DEFAULT_CONFIG, [f"data.num_clients={clients}", f"data.partition.kind={kind}",
                                       "data.partition.max_draws=1", "data.partition.repair=true"])
    partition = timed("build", make_partition, y, cfg.data, cfg.seed)
    digest = timed("hash", partition.content_hash)
    timed("store", store_partition, partition, f"{tmp}/partition.parquet")
    reloaded = timed("load", load_partition, f"{tmp}/partition.parquet", clients)
    unpickled = timed("pickle", lambda: pickle.loads(pickle.dumps(reloaded, protocol=5)))  # Ray's object store
    assert reloaded.content_hash() == unpickled.content_hash() == digest
    return y.nbytes


def partition_report(measured: list[dict]) -> str:
    base = {m["kind"]: m for m in measured if m["clients"] == PARTITION_CLIENTS[0]}
    rows = []
    for m in measured:
        steps = ", ".join(f"{step} {s:.2f}" for step, s in m["seconds"].items())
        total = sum(m["seconds"].values())
        rows.append([m["kind"], f"{m['clients']:,}", steps, f"{total:.2f}",
                     f"{total / sum(base[m['kind']]['seconds'].values()):.0f}", f"{m['peak_mb']:.0f}",
                     f"{m['data_mb']:.0f}"])
    return markdown_table(["what", "clients", "seconds per step", "seconds in all", "× the 10,000 clients (10 = linear)",
                           "peak RSS MB above imports", "the data, MB (labels or images)"], rows) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--algorithm", action="append", help="default: " + ", ".join(ALGORITHMS))
    parser.add_argument("--partitions", action="store_true", help="partitions at scale instead of runs")
    parser.add_argument("--partition-child", nargs=3, metavar=("CLIENTS", "KIND", "TMP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.partition_child:
        clients, kind, tmp = args.partition_child
        print(json.dumps(partition_child(int(clients), kind, tmp)))
    elif args.partitions:
        print(partition_report(measure_partitions()))
    else:
        print(report(measure(tuple(args.algorithm or ALGORITHMS))))
