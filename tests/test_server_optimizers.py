"""FedAvgM and the server optimisers (tasks/algorithms/server_optimizers.py; docs/methods/fedavgm.md) by hand, and
algorithm.server_optimizer and algorithm.averaging in a run."""
from __future__ import annotations

import math

import pytest
import torch

from orchestrator.experiment.config import ConfigError, load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import run_in_process
from tasks.algorithms.base import ClientUpdate
from tasks.algorithms.server_optimizers import ServerOptimizer
from tests.method_fixtures import tiny_method


def filled(state, value: float) -> dict[str, torch.Tensor]:
    return {k: torch.full_like(v, value) for k, v in state.items()}


def test_fedavgm_two_rounds_of_server_momentum():
    """β = 0.9, η = 1, x = 0. Round 1: x̄ = 1, v = 1, x = 1. Round 2: x̄ = 3, v = 0.9·1 + 2 = 2.9, x = 3.9."""
    method = tiny_method("fedavgm")
    state = {**method.init_global()}
    state["model"] = filled(state["model"], 0.0)
    state = method.aggregate(state, [ClientUpdate(0, 1, tensors=filled(state["model"], 1.0))], 0)
    assert all(torch.allclose(v, torch.ones_like(v)) for v in state["model"].values())
    state = method.aggregate(state, [ClientUpdate(0, 2, tensors=filled(state["model"], 2.0)),
                                     ClientUpdate(1, 2, tensors=filled(state["model"], 4.0))], 1)
    for name, value in state["model"].items():
        assert torch.allclose(value, torch.full_like(value, 3.9)), name
        assert torch.allclose(state["momentum"]["m"][name], torch.full_like(value, 2.9)), name


@pytest.mark.parametrize("name, v", [("adam", 0.99 * 1e-6 + 0.01 * 0.25), ("yogi", 1e-6 + 0.01 * 0.25)])
def test_adam_and_yogi_one_step_by_hand(name, v):
    """x = 0, x̄ = 0.5 (Δ = 0.5), β₁ = 0.9, β₂ = 0.99, τ = 1e-3, η = 0.1: m = 0.05, v from τ² = 1e-6."""
    opt = ServerOptimizer(name, lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)
    model, slots = opt.step({"w": torch.tensor([0.0])}, {"w": torch.tensor([0.5])}, {}, {"w"})
    assert float(slots["v"]["w"]) == pytest.approx(v, rel=1e-5)
    assert float(model["w"]) == pytest.approx(0.1 * 0.05 / (math.sqrt(v) + 1e-3), rel=1e-5)


def test_buffers_take_the_aggregate():
    opt = ServerOptimizer("momentum", lr=1.0, beta1=0.9)
    model, _ = opt.step({"w": torch.tensor([0.0]), "n": torch.tensor(1)}, {"w": torch.tensor([1.0]),
                                                                          "n": torch.tensor(7)}, {}, {"w"})
    assert int(model["n"]) == 7


def test_a_server_optimizer_and_uniform_averaging_run_and_change_the_history(tmp_path):
    base = ["data.num_clients=4", "train.rounds=2", f"data.partitions_dir={tmp_path}"]
    cfg = load_config("configs/default.yaml", base)
    data = prepare_data(cfg)
    plain = run_in_process(cfg, data)
    adam = run_in_process(load_config("configs/default.yaml", [*base, "algorithm.server_optimizer.name=adam"]), data)
    uniform = run_in_process(load_config("configs/default.yaml", [*base, "algorithm.averaging=uniform"]), data)
    assert adam[-1]["accuracy"] != plain[-1]["accuracy"] and uniform[-1]["accuracy"] != plain[-1]["accuracy"]
    fedavgm = run_in_process(load_config("configs/default.yaml", [*base, "algorithm.name=fedavgm"]), data)
    momentum = run_in_process(load_config("configs/default.yaml", [*base, "algorithm.server_optimizer.name=momentum"]),
                              data)
    assert [m["accuracy"] for m in fedavgm] == [m["accuracy"] for m in momentum]  # one building block


def test_settings_a_method_cannot_take_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="algorithm.averaging.*fedfm aggregates in its own way"):
        load_config("configs/default.yaml", ["algorithm.name=fedfm", "algorithm.averaging=uniform"])
    with pytest.raises(ConfigError, match="algorithm.server_optimizer.*local has no global model"):
        load_config("configs/default.yaml", ["algorithm.name=local", "algorithm.server_optimizer.name=adam"])
