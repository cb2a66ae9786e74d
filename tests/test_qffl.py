"""q-FFL's server step (docs/methods/qffl.md) by hand on tiny tensors, its q = 0 reduction to FedAvg with equal
weights, what a client sends, and short runs on both engines."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import run_in_process
from tasks.algorithms.base import ClientUpdate
from tasks.algorithms.qffl import LOSS_FLOOR, qffl_step
from tests.method_fixtures import X, Y, client, context, one_step, tiny_method


def filled(state, value: float) -> dict[str, torch.Tensor]:
    return {k: torch.full_like(v, value) for k, v in state.items()}


def two_clients(method, lr: float):
    """w = 0; client 1 trained to −0.5 with loss 1, client 2 to −1 with loss 4; L = 1/lr."""
    state = method.init_global()
    state["model"] = filled(state["model"], 0.0)
    lip = torch.tensor(1.0 / lr, dtype=torch.float64)
    updates = [ClientUpdate(0, 5, tensors=filled(state["model"], -0.5),
                            stats={"loss": torch.tensor(1.0, dtype=torch.float64), "lipschitz": lip}),
               ClientUpdate(1, 50, tensors=filled(state["model"], -1.0),
                            stats={"loss": torch.tensor(4.0, dtype=torch.float64), "lipschitz": lip})]
    return state, updates


@pytest.mark.parametrize("q, expected", [
    # L = 2, d entries: Δw_1 = 1, Δw_2 = 2 each entry, so ‖Δw_1‖² = d, ‖Δw_2‖² = 4d.
    # q = 1: Δ = 1·1 + 4·2 = 9; h_1 = d + 2·1, h_2 = 4d + 2·4; w⁺ = −9 / (5d + 10)
    (1.0, lambda d: -9 / (5 * d + 10)),
    # q = 2: Δ = 1·1 + 16·2 = 33; h_1 = 2·1·d + 2·1, h_2 = 2·4·4d + 2·16; w⁺ = −33 / (34d + 34)
    (2.0, lambda d: -33 / (34 * d + 34)),
])
def test_the_server_step_matches_a_hand_computation(q, expected):
    method = tiny_method("qffl", q=q)
    state, updates = two_clients(method, lr=0.5)
    d = sum(p.numel() for p in method.working_model().parameters())
    assert d == 14  # Linear(3, 2) and Linear(2, 2), with biases
    new = method.aggregate(state, updates, 0)["model"]
    for name, value in new.items():
        assert torch.allclose(value.double(), torch.full_like(value.double(), expected(d)), atol=1e-6), name
    assert expected(d) != pytest.approx(-0.75)  # not the plain mean the q = 0 step gives


def test_q_zero_is_fedavg_with_equal_weights():
    """q = 0: Δ_k = Δw_k, h_k = L, so w⁺ = w − mean_k L(w − w̄_k)/L = the unweighted mean of the w̄_k, whatever the
    losses and the sample counts (5 and 50 here: FedAvg's sample weighting would give −0.95)."""
    method = tiny_method("qffl", q=0.0)
    state, updates = two_clients(method, lr=0.1)
    for name, value in method.aggregate(state, updates, 0)["model"].items():
        assert torch.allclose(value, torch.full_like(value, -0.75), atol=1e-6), name


def test_the_loss_floor_keeps_a_zero_loss_finite():
    start = {"w": torch.zeros(2)}
    out = qffl_step(start, [{"w": torch.ones(2)}, {"w": -torch.ones(2)}], [0.0, 1.0], [1.0, 1.0], 0.5, {"w"})
    assert torch.isfinite(out["w"]).all()
    # client 1's F^q = 1e-5 and h ≈ 0.5·(1e-10)^(−0.5)·2 = 1e5: it damps the step, as in the authors' code
    f = LOSS_FLOOR
    h = 0.5 * f**-0.5 * 2 + f**0.5 + 0.5 * 2 + 1
    assert out["w"] == pytest.approx(torch.full((2,), -(f**0.5 * -1 + 1 * 1) / h), rel=1e-6)


def test_a_client_sends_its_loss_before_training_and_one_over_the_learning_rate():
    train = one_step(lr=0.25)
    method = tiny_method("qffl", train=train)
    data = client()
    payload = method.payload(method.init_global(), 0)
    update, _ = method.client_update(payload, data, {}, context(train, data))
    model = method.new_model()
    model.load_state_dict(payload["model"])
    with torch.no_grad():
        before = float(F.cross_entropy(model(X), Y))
    assert float(update.stats["loss"]) == pytest.approx(before, rel=1e-6)
    assert float(update.stats["loss"]) != pytest.approx(update.metrics["train_loss"] + 1.0)
    assert float(update.stats["lipschitz"]) == pytest.approx(4.0)
    assert not all(torch.equal(update.tensors[k], payload["model"][k]) for k in payload["model"])  # it trained
    fixed = tiny_method("qffl", train=train, lipschitz=3.0)
    update, _ = fixed.client_update(payload, data, {}, context(train, data))
    assert float(update.stats["lipschitz"]) == 3.0  # algorithm.qffl.lipschitz in place of 1/η


@pytest.mark.parametrize("engine", ["sequential", "vectorized"])
def test_two_rounds_run_on_each_engine(tmp_path, engine):
    cfg = load_config("configs/default.yaml", [
        "algorithm.name=qffl", "algorithm.qffl.q=2", "data.num_clients=4", "train.rounds=2",
        f"train.engine={engine}", f"data.partitions_dir={tmp_path}"])
    history = run_in_process(cfg, prepare_data(cfg))
    assert len(history) == 2
    assert all(math.isfinite(m["accuracy"]) and 0.0 <= m["accuracy"] <= 1.0 for m in history)
    assert all(math.isfinite(m["train_loss"]) for m in history)


def test_a_negative_q_is_refused_in_one_line(capsys):
    from orchestrator.cli import main

    assert main(["config", "check", "configs/default.yaml", "--set=algorithm.name=qffl",
                 "--set=algorithm.qffl.q=-1"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "algorithm.qffl.q = -1" in line and "greater than or equal to 0" in line, line


def test_the_fairness_comparison_s_variants_validate_and_judge_every_method_client_by_client():
    from pipelines.compare import read_variants_file

    variants = read_variants_file("configs/fairness_mnist.variants.yaml")
    assert {v["algorithm.name"] for v in variants.values()} == {"fedavg", "qffl", "ditto", "fednh"}
    assert sorted(v["algorithm.qffl.q"] for v in variants.values() if v["algorithm.name"] == "qffl") == [1.0, 5.0]
    assert all(v["algorithm.qffl.lipschitz"] == 1.0 for v in variants.values() if v["algorithm.name"] == "qffl")
    for overrides in variants.values():
        cfg = load_config("configs/fairness_mnist.yaml", [f"{k}={v}" for k, v in overrides.items()])
        assert cfg.data.dataset == "mnist" and cfg.data.partition.alpha == 0.3
        assert cfg.eval.per_client.enabled and cfg.eval.per_client.sample == 25
        assert cfg.algorithm.name == overrides["algorithm.name"]


def test_privacy_refuses_it_in_one_line_its_loss_being_uncovered():
    from orchestrator.experiment.config import ConfigError

    with pytest.raises(ConfigError, match="qffl is not one of the methods whose uploads the privacy block knows"):
        load_config("configs/default.yaml", ["algorithm.name=qffl", "privacy.models.clip=1.0",
                                             "privacy.models.noise_multiplier=0.5"])
