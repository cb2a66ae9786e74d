"""Scale: 100,000 clients with 100 per round, against 1,000 clients with the same 100 per round.

For FedAvg (no client state), FedSA (a private heterogeneous model per client) and MOON (a previous model per
client): the median seconds per round (rounds 2 to R-1: the first pays for start-up, the last for the final
evaluation; a round after a checkpoint has that checkpoint's seconds taken off), the peak memory of every process
together (the driver, Ray's GCS and raylet, the coordinator and the client actors; summed PSS), and the seconds
per checkpoint (timed in the coordinator; one every 2 rounds, so each covers the 200 clients trained since the
previous one). Personalized evaluation covers a seeded sample of 100 clients, at the last round only; client
states stay resident up to `resources.resident_clients` (the default). Synthetic 8×8 images (20 per client,
and a global test set of 5,000 at every size), IID, the digits MLP, 1 local epoch. Each (method, size) runs in a fresh process with its own Ray instance.

    python -m benchmarks.scale [--algorithm fedavg] [--clients 1000 --clients 100000] [--rounds 7] [--repeats 2]
    mooring bench scale [--size 1000/100 --size 100000/100] [--rounds 7] [--repeats 2]

`--partitions`: partitions at scale instead. Building, hashing, storing (Parquet, through orchestrator.io.storage),
reloading and pickling (to bytes and back, as into Ray's object store) a partition of 100,000 clients with 20
samples each, against 10,000 clients with 20 each (the baseline: a ratio of 10 is linear in the data), and
generating the synthetic dataset (25 samples per client, 8×8) that holds them; each in a fresh process, whose
peak RSS above its imports is the memory it cost.

    python -m benchmarks.scale --partitions
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common import DEFAULT_CONFIG, PeakMemory, child_env, markdown_table

GB, MB = 1024**3, 1024**2
ALGORITHMS = ("fedavg", "fedsa", "moon")  # no client state; a private model per client; a previous model per client
SIZES = ("1000/100", "100000/100")  # CLIENTS/PER_ROUND; the first is the baseline
ROUNDS = 7
CHECKPOINT_EVERY = 2
EVALUATED = 100  # eval.personalized_clients


TRAIN_PER_CLIENT, GLOBAL_TEST = 20, 5_000


def setting(size: str, algorithm: str, rounds: int, tmp: str) -> list[str]:
    """20 samples per client (16 to train, 4 its own test) and a global test set of 5,000 whatever the clients
    (at 1,000 clients: the 25,000 samples and 20 % test of the earlier 1,000-client table)."""
    clients, per_round = (int(n) for n in size.split("/"))
    samples = clients * TRAIN_PER_CLIENT + GLOBAL_TEST
    return [
        "data.dataset=synthetic", f"data.synthetic.num_samples={samples}",
        f"data.test_fraction={GLOBAL_TEST / samples:.12f}",
        f"data.num_clients={clients}", "data.partition.kind=iid", "data.client_test_fraction=0.2",
        f"train.clients_per_round={per_round}", f"train.rounds={rounds}", "train.local_epochs=1",
        "train.batch_size=20", "eval.every=100000", f"eval.personalized_clients={min(EVALUATED, clients)}",
        f"checkpoint.every={CHECKPOINT_EVERY}", f"algorithm.name={algorithm}",
        f"checkpoint.dir={tmp}/runs", f"data.partitions_dir={tmp}/p", f"tracking.uri=sqlite:///{tmp}/mlflow.db",
    ]


def measure(algorithms: tuple[str, ...] = ALGORITHMS, sizes: tuple[str, ...] = SIZES, rounds: int = ROUNDS,
            repeats: int = 1) -> list[dict]:
    """Each method's sizes run one after another, `repeats` times over (interleaved, so a busy spell on a shared
    machine hits both sizes); of the repeats the fastest rounds and checkpoints count, and the highest memory."""
    if rounds < 4:
        from orchestrator.experiment.config import ConfigError

        raise ConfigError(f"--rounds {rounds}: the scale benchmark needs at least 4 (round 1 and the last are left out)")
    out = []
    for algorithm in algorithms:
        runs = [[measure_one(algorithm, size, rounds) for size in sizes] for _ in range(repeats)]
        out += [best_of([r[i] for r in runs]) for i in range(len(sizes))]
    return out


def best_of(runs: list[dict]) -> dict:
    fastest = min(runs, key=lambda m: m["round_s"])
    return fastest | {"checkpoint_s": min(m["checkpoint_s"] for m in runs),
                      "peak_pss_gb": max(m["peak_pss_gb"] for m in runs),
                      "peak_rss_gb": max(m["peak_rss_gb"] for m in runs), "repeats": len(runs)}


def measure_one(algorithm: str, size: str, rounds: int) -> dict:
    """One run in a fresh process (its own Ray instance), its whole process tree's memory sampled from here."""
    with tempfile.TemporaryDirectory(prefix="mooring-scale-") as tmp:
        cmd = [sys.executable, "-m", "benchmarks.scale", "--run-child", algorithm, size, str(rounds), tmp]
        with PeakMemory() as mem:
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=child_env(), check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{algorithm}, {size}: {out.stderr.strip()[-800:]}")
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    return {"algorithm": algorithm, "size": size, "peak_pss_gb": mem.peak / GB, "peak_rss_gb": mem.peak_rss / GB,
            "load": os.getloadavg()[0], **measured}


def run_child(algorithm: str, size: str, rounds: int, tmp: str) -> dict:
    import ray

    from orchestrator.driver.run import run_experiment
    from orchestrator.experiment.config import load_config
    from orchestrator.ray_runtime.ray_start import init_ray

    init_ray(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cfg = load_config(DEFAULT_CONFIG, setting(size, algorithm, rounds, tmp))
    result = run_experiment(cfg, progress=False)
    ray.shutdown()
    checkpoints = result.phases.get("checkpoint", [])
    return {"round_s": steady_round_seconds(result.round_seconds, checkpoints, CHECKPOINT_EVERY),
            "checkpoint_s": statistics.median(checkpoints[:-1] or checkpoints),
            "startup_s": result.wall_seconds - sum(result.round_seconds)}


def steady_round_seconds(round_seconds: list[float], checkpoints: list[float], every: int) -> float:
    """The median of rounds 2 to R-1, each without the checkpoint it waited for: the coordinator runs a
    checkpoint due after round r before round r+1, so the driver's time of round r+1 includes it."""
    own = list(round_seconds)
    for k, seconds in enumerate(checkpoints[:-1]):  # the last one is after the last round
        after = (k + 1) * every  # a checkpoint every `every` rounds: after round `after`, 1-based
        if after < len(own):
            own[after] -= seconds  # round after+1, 0-based index `after`
    return statistics.median(own[1:-1])


def report(measured: list[dict]) -> str:
    base = {}
    rows = []
    for m in measured:
        base.setdefault(m["algorithm"], m)
        b = base[m["algorithm"]]
        clients, per_round = m["size"].split("/")
        rows.append([m["algorithm"], f"{int(clients):,}", per_round, f"{m['round_s']:.3f}",
                     f"{m['round_s'] / b['round_s']:.2f}", f"{m['checkpoint_s']:.3f}", f"{m['peak_pss_gb']:.2f}",
                     f"{m['peak_rss_gb']:.2f}", f"{m['startup_s']:.0f}", f"{m['load']:.1f}"])
    return markdown_table(["algorithm", "clients", "per round", "s/round (median)", "× the first size's (target ≤ 1.2)",
                           "s/checkpoint", "peak memory GB, summed PSS", "summed RSS GB",
                           "start-up and end, s", "load average (1 min)"], rows) + "\n"


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

    from orchestrator.experiment.config import load_config
    from orchestrator.experiment.datasets import load_partition, store_partition
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
    parser.add_argument("--clients", action="append", type=int, help="total clients, repeatable, 100 per round "
                        "(default: " + ", ".join(s.split("/")[0] for s in SIZES) + "; the first is the baseline)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds per run (default {ROUNDS}, at least 4)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each size, interleaved (default 1)")
    parser.add_argument("--partitions", action="store_true", help="partitions at scale instead of runs")
    parser.add_argument("--partition-child", nargs=3, metavar=("CLIENTS", "KIND", "TMP"), help=argparse.SUPPRESS)
    parser.add_argument("--run-child", nargs=4, metavar=("ALGORITHM", "SIZE", "ROUNDS", "TMP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_child:
        algorithm, size, rounds, tmp = args.run_child
        print(json.dumps(run_child(algorithm, size, int(rounds), tmp)))
    elif args.partition_child:
        clients, kind, tmp = args.partition_child
        print(json.dumps(partition_child(int(clients), kind, tmp)))
    elif args.partitions:
        print(partition_report(measure_partitions()))
    else:
        sizes = tuple(f"{n}/100" for n in args.clients) if args.clients else SIZES
        print(report(measure(tuple(args.algorithm or ALGORITHMS), sizes, args.rounds, max(1, args.repeats))))
