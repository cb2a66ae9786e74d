"""On a CUDA GPU, through real Ray client actors holding a quarter of it each (issue 16): every method trains
on the GPU and learns, and a checkpoint moves between the GPU and the CPU. Skipped where there is no GPU."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from orchestrator.driver.run import run_experiment
from orchestrator.driver.run_dir import read_run_config
from orchestrator.experiment.config import load_config
from tasks.algorithms import ALGORITHMS
from tests.checkpoint_devices import saved_devices

pytestmark = [pytest.mark.gpu, pytest.mark.ray]

# real digits, centred, IID over 10 clients: every method reaches ≥ 0.7 in 8 rounds on the CPU
LEARNS = ["train.rounds=8", "eval.every=100", "data.partition.kind=iid", "data.normalize=center",
          "train.optimizer.momentum=0.9", "algorithm.fedfm.warmup_rounds=2", "algorithm.fedfm_lite.warmup_rounds=2",
          "algorithm.fedfm_lite.period=2", "algorithm.fedavg_periodic.period=2", "tracking.enabled=false"]
ON_GPU = ["resources.num_actors=4", "resources.gpus_per_actor=0.25", "resources.cpus_per_actor=0.5"]
ON_CPU = ["resources.num_actors=4", "resources.gpus_per_actor=0", "resources.cpus_per_actor=0.5"]


@pytest.mark.parametrize("method", ALGORITHMS.names())
def test_every_method_trains_on_a_quarter_of_the_gpu_and_learns(ray_session, workdir, method):
    cfg = load_config("configs/default.yaml", LEARNS + ON_GPU + workdir + [f"algorithm.name={method}"])
    result = run_experiment(cfg, progress=False)
    actors = json.loads((Path(result.run_dir) / "actors.json").read_text())
    assert len(actors) == 4
    for actor in actors:
        assert actor["assigned"].get("GPU") == pytest.approx(0.25)  # the share Ray gave it
        assert actor["gpu_ids"] and actor["device"] == "cuda"
        assert actor["data_device"].startswith("cuda")
        assert actor["trained_model_devices"] and all(d.startswith("cuda") for d in actor["trained_model_devices"])
        assert actor["cuda_peak_bytes"] > 0
    learned = result.final_accuracy if result.final_accuracy is not None else result.personalized_accuracy
    assert learned > 0.5  # chance is 0.1 (the global model's, or the clients' own where there is none)
    latest = Path(result.run_dir) / "checkpoints" / (Path(result.run_dir) / "checkpoints" / "LATEST").read_text()
    assert saved_devices(latest) == {"cpu"}


def resume_next_round(run_dir: str, copy: Path, overrides: list[str]):
    shutil.copytree(run_dir, copy)
    return run_experiment(read_run_config(str(copy), overrides), progress=False, resume_dir=str(copy))


def final_state(run_dir: str) -> dict:
    return torch.load(Path(run_dir) / "final_state.pt", weights_only=True)


def assert_close_states(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        if a.is_floating_point():
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
        else:
            assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_close_states(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_close_states(x, y)
    else:
        assert a == pytest.approx(b, rel=1e-3, abs=1e-4)


@pytest.mark.parametrize("written_on", ["gpu", "cpu"])
def test_a_checkpoint_resumes_on_the_other_device_with_the_same_next_round(ray_session, workdir, tmp_path,
                                                                           written_on, method="feddebias"):
    """FedDebias (pseudo-data in the payload and in client states, a projector with the model): checkpointed
    after round 2, its round 3 on the GPU and on the CPU agree."""
    first = ON_GPU if written_on == "gpu" else ON_CPU
    cfg = load_config("configs/default.yaml", LEARNS + first + workdir + [
        f"algorithm.name={method}", "train.rounds=3", "checkpoint.every=2", "eval.every=1"])
    stopped = run_experiment(cfg, progress=False, stop_after=2)
    checkpoint = Path(stopped.run_dir) / "checkpoints" / "round-000002"
    assert saved_devices(checkpoint) == {"cpu"}
    # distinct directory names: the coordinator actor is named after its run directory
    on_gpu = resume_next_round(stopped.run_dir, tmp_path / f"{method}-{written_on}-to-gpu", ON_GPU)
    on_cpu = resume_next_round(stopped.run_dir, tmp_path / f"{method}-{written_on}-to-cpu", ON_CPU)
    assert len(on_gpu.history) == len(on_cpu.history) == 3
    assert on_gpu.history[:2] == on_cpu.history[:2] == stopped.history
    gpu_round, cpu_round = on_gpu.history[2], on_cpu.history[2]
    assert gpu_round.keys() == cpu_round.keys()
    for key, value in gpu_round.items():
        if key.startswith("accuracy") or key.startswith("personalized_"):
            assert value == pytest.approx(cpu_round[key], abs=0.01), key  # ≤ 1 % of the test samples
        else:
            assert value == pytest.approx(cpu_round[key], rel=1e-3, abs=1e-4), key
    assert_close_states(final_state(on_gpu.run_dir), final_state(on_cpu.run_dir))
