"""Scale: 1,000 clients with 100 per round, against 100 clients with the same 100 per round.

Peak memory of every process together (the driver, Ray's GCS and raylet, the coordinator and the client
actors; summed PSS) must stay under 3 GB, and the time per round must depend on the clients per round,
not on the total. Synthetic 8×8 images (20 per client), IID, the digits MLP, 1 local epoch.

    python -m benchmarks.scale [--algorithm fedavg] [--algorithm fedsa]        (or: mooring bench scale)
"""
from __future__ import annotations

import argparse
import statistics
import tempfile

from benchmarks.common import PeakMemory, markdown_table

GB = 1024**3


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


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--algorithm", action="append", help="default: " + ", ".join(ALGORITHMS))
    print(report(measure(tuple(parser.parse_args().algorithm or ALGORITHMS))))
