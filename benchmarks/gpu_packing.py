"""GPU packing: client updates per second with 1, 2, 4 and 8 client actors sharing one GPU.

FedFA on its CIFAR-10 CNN (`acar_cnn`, 3×32×32) with synthetic images, FedFA's CIFAR-10 protocol otherwise
(docs/methods/fedfa.md: clients of 500 samples, batch 64, 5 local epochs) but 32 clients, all in every round, so that
1, 2, 4 and 8 actors get equal shares. Each actor asks for 1/K of the GPU and one CPU. The first round (CUDA
kernels loaded and tuned in every actor) is left out; the GPU's utilisation is sampled with `nvidia-smi` over
the rounds that count. Needs a CUDA GPU and `nvidia-smi`; elsewhere it says so and exits.

    python -m benchmarks.gpu_packing          (or: mooring bench gpu)
"""
from __future__ import annotations

import statistics
import subprocess
import tempfile
import threading

from benchmarks.common import markdown_table

PACKINGS = (1, 2, 4, 8)
CLIENTS_PER_ROUND = 32
ROUNDS = 5


def config(actors: int, tmp: str):
    """configs/default.yaml with the CNN in place of the digits MLP (whose options it would not take)."""
    from orchestrator.experiment.config import apply_overrides, build_config, read_yaml

    raw = read_yaml("configs/default.yaml")
    raw["model"] = {"name": "acar_cnn"}
    overrides = [
        "data.dataset=synthetic", "data.synthetic.num_samples=17778", "data.synthetic.channels=3",
        "data.synthetic.size=32", "data.test_fraction=0.1", "data.num_clients=32", "data.partition.kind=iid",
        "data.client_test_fraction=0", "algorithm.name=fedfa", f"train.rounds={ROUNDS}",
        f"train.clients_per_round={CLIENTS_PER_ROUND}", "train.local_epochs=5", "train.batch_size=64",
        "train.optimizer.lr=0.01", "train.optimizer.weight_decay=0", "eval.every=100", "checkpoint.every=0",
        f"resources.num_actors={actors}", f"resources.gpus_per_actor={1 / actors}", "resources.cpus_per_actor=1",
        f"checkpoint.dir={tmp}/runs", f"data.partitions_dir={tmp}/p", "tracking.enabled=false",
    ]
    return build_config(apply_overrides(raw, overrides), "benchmarks/gpu_packing.py")


class GpuUtilisation:
    """`nvidia-smi` sampling the GPU's utilisation (%) every 200 ms between `start` and `stop`."""

    def __init__(self):
        self.samples: list[float] = []
        self._proc = None
        self._reader = None

    def start(self) -> None:
        self._proc = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                       "-i", "0", "-lms", "200"], stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            if line.strip().isdigit():
                self.samples.append(float(line))

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait()
            self._reader.join(timeout=5)


def gpu_name() -> str:
    out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader",
                          "-i", "0"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def measure_one(actors: int, tmp: str) -> dict:
    from orchestrator.driver.run import run_experiment

    util = GpuUtilisation()

    def sample_steady_rounds(metrics) -> None:
        if metrics["round"] == 1:
            util.start()
        if metrics["round"] == ROUNDS:
            util.stop()

    try:
        result = run_experiment(config(actors, tmp), progress=False, on_round=sample_steady_rounds)
    finally:
        util.stop()
    steady = result.round_seconds[1:]
    return {"actors": actors, "rate": CLIENTS_PER_ROUND * len(steady) / sum(steady),
            "util_mean": statistics.fmean(util.samples) if util.samples else float("nan"),
            "util_max": max(util.samples, default=float("nan")), "accuracy": result.final_accuracy}


def measure(packings=PACKINGS) -> dict:
    import ray

    from orchestrator.ray_runtime.ray_start import init_ray

    tmp = tempfile.mkdtemp(prefix="mooring-gpu-")
    init_ray(include_dashboard=False, log_to_driver=False)
    rows = []
    for k in packings:
        rows.append(measure_one(k, tmp))
        print(f"gpu packing: {k} actor(s): {rows[-1]['rate']:.2f} client updates/s, GPU utilisation mean "
              f"{rows[-1]['util_mean']:.0f} %, max {rows[-1]['util_max']:.0f} %", flush=True)
    ray.shutdown()
    return {"gpu": gpu_name(), "rows": rows}


def report(measured: dict) -> str:
    rows = measured["rows"]
    base = rows[0]["rate"]
    best = max(rows, key=lambda r: r["rate"])
    table = markdown_table(
        ["actors sharing the GPU (GPU each)", "client updates / s", "vs 1 actor", "GPU utilisation, mean %",
         "GPU utilisation, max %"],
        [[f"{r['actors']} ({1 / r['actors']:g})", f"{r['rate']:.2f}", f"{r['rate'] / base:.2f}×",
          f"{r['util_mean']:.0f}", f"{r['util_max']:.0f}"] for r in rows])
    verdict = "met" if best["rate"] >= 3 * base else "not met"
    return (f"GPU: {measured['gpu']}.\n\n{table}\n\nBest packing: {best['actors']} actors, "
            f"{best['rate'] / base:.2f}× one actor (target ≥ 3×: {verdict}).\n")


if __name__ == "__main__":
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_packing: no CUDA GPU here; run it on a machine with one")
    print(report(measure()))
