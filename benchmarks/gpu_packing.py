"""GPU packing: client updates per second with 1, 2, 4 and 8 client actors sharing one GPU.

FedFA's CIFAR-10 CNN (`acar_cnn`, 3×32×32) on synthetic images, FedAvg's local step (the packing question
is the same for every method), 1 local epoch of 500 samples per client, 32 clients per round. Each actor asks
for 1/K of the GPU. Needs a CUDA GPU; elsewhere it says so and exits.

    python -m benchmarks.gpu_packing          (or: mooring bench gpu)
"""
from __future__ import annotations

import tempfile

from benchmarks.common import markdown_table


def setting(actors: int, tmp: str) -> list[str]:
    return [
        "data.dataset=synthetic", "data.synthetic.num_samples=20000", "data.synthetic.channels=3",
        "data.synthetic.size=32", "data.test_fraction=0.1", "data.num_clients=32", "data.partition.kind=iid",
        "data.client_test_fraction=0", "model.name=acar_cnn", "model.hidden=null", "train.rounds=4",
        "train.local_epochs=1", "train.batch_size=64", "eval.every=100", "checkpoint.every=0",
        f"resources.num_actors={actors}", f"resources.gpus_per_actor={1 / actors}", "resources.cpus_per_actor=1",
        f"checkpoint.dir={tmp}/runs", f"data.partitions_dir={tmp}/p", "tracking.enabled=false",
    ]


def measure(packings=(1, 2, 4, 8)) -> dict[int, float]:
    import ray

    from orchestrator.config import load_config
    from orchestrator.run import init_ray, run_experiment

    tmp = tempfile.mkdtemp(prefix="mooring-gpu-")
    init_ray(include_dashboard=False, log_to_driver=False)
    rates = {}
    for k in packings:
        cfg = load_config("configs/default.yaml", [o for o in setting(k, tmp) if o != "model.hidden=null"])
        result = run_experiment(cfg, progress=False)
        steady = result.round_seconds[1:]  # round 1 pays for CUDA context creation in every actor
        rates[k] = cfg.clients_per_round * len(steady) / sum(steady)
    ray.shutdown()
    return rates


def report(rates: dict[int, float]) -> str:
    base = rates[min(rates)]
    rows = [[k, f"{r:.1f}", f"{r / base:.2f}×"] for k, r in sorted(rates.items())]
    return markdown_table(["actors sharing the GPU", "client updates / s", "vs 1 actor (target best ≥ 3×)"], rows) + "\n"


if __name__ == "__main__":
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_packing: no CUDA GPU here; run it on a machine with one")
    print(report(measure()))
