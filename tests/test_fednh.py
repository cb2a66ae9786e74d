"""FedNH (docs/methods/fednh.md): uniform prototypes, the frozen scaled-cosine head, the server's prototype update, the
§5 personalized metrics, short federated runs, and resuming a run with its clients' personal state."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from orchestrator.clients.client_host import ClientHost
from orchestrator.experiment.config import load_config, with_overrides
from orchestrator.experiment.datasets import prepare_data
from orchestrator.io.storage import torch_bytes, torch_load_safe
from orchestrator.server.federation import Server, in_process_calls, run_in_process
from tasks.algorithms import ALGORITHMS, ClientData, ClientUpdate, RoundContext, Setup, TrainSettings
from tasks.algorithms.fednh import PROTOTYPES, SCALE, FedNHParams
from tasks.algorithms.personal import weighted_correct
from tasks.algorithms.prototypes import (
    initial_prototypes,
    optimised_prototypes,
    orthogonal_prototypes,
    simplex_prototypes,
    smoothed_prototype_update,
)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def off_diagonal_cosines(w: torch.Tensor) -> torch.Tensor:
    cos = w @ w.T
    return cos[~torch.eye(len(w), dtype=torch.bool)]


# ------------------------------------------------------------------------------------- initialisation
@pytest.mark.parametrize("classes,dim", [(10, 64), (10, 9), (3, 2)])  # d ≥ C and the tight C = d + 1
def test_simplex_prototypes_are_unit_and_equiangular(classes, dim):
    w = simplex_prototypes(classes, dim, gen())
    assert w.shape == (classes, dim)
    assert torch.allclose(w.norm(dim=1), torch.ones(classes), atol=1e-6)
    assert torch.allclose(off_diagonal_cosines(w), torch.full((classes * (classes - 1),), -1.0 / (classes - 1)),
                          atol=1e-6)


def test_orthogonal_prototypes_follow_the_code():
    w = orthogonal_prototypes(10, 64, gen())
    assert torch.allclose(w.norm(dim=1), torch.ones(10), atol=1e-6)
    assert off_diagonal_cosines(w).abs().max() < 1e-6
    wide = orthogonal_prototypes(12, 4, gen())  # C > d: rows renormalised
    assert torch.allclose(wide.norm(dim=1), torch.ones(12), atol=1e-6)


def test_eq1_solved_numerically_beyond_the_simplex():
    w = optimised_prototypes(5, 2, gen())  # d = 2: the optimum is the regular pentagon, max cosine cos 72°
    assert torch.allclose(w.norm(dim=1), torch.ones(5), atol=1e-6)
    assert off_diagonal_cosines(w).max() == pytest.approx(math.cos(2 * math.pi / 5), abs=1e-3)
    assert torch.equal(initial_prototypes("simplex", 5, 2, gen()), w)


def test_initial_prototypes_are_seeded():
    assert torch.equal(initial_prototypes("orthogonal", 10, 16, gen(3)), initial_prototypes("orthogonal", 10, 16, gen(3)))
    assert not torch.equal(initial_prototypes("simplex", 10, 16, gen(3)), initial_prototypes("simplex", 10, 16, gen(4)))


# ------------------------------------------------------------------------------------- server update
def test_prototype_update_by_hand():
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    # client A: 2 samples of class 0 with unit mean (0.6, 0.8), 1 of class 2 with (0, 1); client B: 1 of class 0, (1, 0)
    sums = torch.tensor([[2 * 0.6 + 1.0, 2 * 0.8 + 0.0], [0.0, 0.0], [0.0, 1.0]])
    counts = torch.tensor([3.0, 0.0, 1.0])
    new = smoothed_prototype_update(w, sums, counts, rho=0.5)

    a0 = (2.2 / math.hypot(2.2, 1.6), 1.6 / math.hypot(2.2, 1.6))
    m0 = (0.5 * 1.0 + 0.5 * a0[0], 0.5 * 0.0 + 0.5 * a0[1])
    expected0 = (m0[0] / math.hypot(*m0), m0[1] / math.hypot(*m0))
    assert new[0].tolist() == pytest.approx(expected0, abs=1e-6)
    assert new[1].tolist() == [0.0, 1.0]  # no participant holds class 1: unchanged, not shrunk
    assert new[2].tolist() == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], abs=1e-6)  # renormalised
    assert smoothed_prototype_update(w, sums, counts, rho=1.0).tolist() == w.tolist()  # FedUH


def make_fednh(**params) -> object:
    setup = Setup(num_classes=3, input_shape=(1, 2, 2), num_clients=2, model_name="mlp",
                  model_options={"hidden": [8], "feature_dim": 4}, train=TrainSettings(batch_size=4, lr=0.1))
    return ALGORITHMS.get("fednh")(FedNHParams(**params), setup)


def test_server_averages_bodies_uniformly_and_moves_prototypes():
    algo = make_fednh(rho=0.5)
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    state = {"model": {"body.w": torch.tensor([0.0]), SCALE: torch.tensor(1.0), PROTOTYPES: w}}
    stats = {"proto_sums": torch.tensor([[0.0, 2.0], [0.0, 0.0], [0.0, 0.0]]), "counts": torch.tensor([2.0, 0.0, 0.0])}
    updates = [ClientUpdate(0, 1, tensors={"body.w": torch.tensor([1.0]), SCALE: torch.tensor(2.0)}, stats=stats),
               ClientUpdate(1, 99, tensors={"body.w": torch.tensor([3.0]), SCALE: torch.tensor(4.0)},
                            stats={k: torch.zeros_like(v) for k, v in stats.items()})]
    new = algo.aggregate(state, updates, 0)["model"]
    assert new["body.w"].item() == pytest.approx(2.0)  # plain mean (Alg. 1), not 1·1 + 99·3 over 100
    assert new[SCALE].item() == pytest.approx(3.0)
    assert new[PROTOTYPES][0].tolist() == pytest.approx([1 / math.sqrt(2), 1 / math.sqrt(2)])
    assert new[PROTOTYPES][1:].tolist() == w[1:].tolist()


# ------------------------------------------------------------------------------------------ the client
def client_data() -> ClientData:
    g = gen(1)
    x, y = torch.randn(8, 1, 2, 2, generator=g), torch.tensor([0, 0, 0, 1, 1, 0, 1, 0])
    return ClientData(0, x, y, x[:4], y[:4], num_classes=3)


def test_head_is_scaled_cosine_and_frozen():
    algo = make_fednh(scale=5.0, learn_scale=True)
    model = algo.working_model(algo.init_global()["model"])
    x = client_data().x
    f = model.body.features(x)
    expected = 5.0 * F.normalize(f, dim=1) @ model.classifier.weight.T
    assert torch.allclose(model(x), expected, atol=1e-6)
    F.cross_entropy(model(x), client_data().y).backward()
    assert model.classifier.weight.grad is None  # W gets no gradient
    assert model.classifier.scale.grad is not None  # learnable s (the code)
    assert all(p.grad is not None for p in model.body.parameters())
    fixed = make_fednh(learn_scale=False)
    assert not fixed.working_model(fixed.init_global()["model"]).classifier.scale.requires_grad


def test_client_update_trains_body_only_and_sends_unit_class_means():
    algo = make_fednh(learn_scale=True)
    state = algo.init_global()
    ctx = RoundContext(round=0, seed=0, train=algo.setup.train, generator=gen(2))
    update, client_state = algo.client_update(algo.payload(state, 0), client_data(), {}, ctx)
    assert PROTOTYPES not in update.tensors  # the frozen head is not sent back
    assert torch.equal(client_state["model"][PROTOTYPES], state["model"][PROTOTYPES])  # PM = (θ_k, W^t)
    assert any(not torch.equal(update.tensors[k], state["model"][k]) for k in update.tensors)
    assert update.stats["counts"].tolist() == [5.0, 3.0, 0.0]
    assert update.stats["proto_sums"].norm(dim=1).tolist() == pytest.approx([5.0, 3.0, 0.0], abs=1e-5)


def test_weighted_accuracies_by_hand():
    y = torch.tensor([0, 0, 1, 2])
    correct = torch.tensor([True, False, True, True])
    counts = torch.tensor([3.0, 1.0, 0.0])
    assert weighted_correct(correct, y, counts / counts.sum()) == pytest.approx((0.75 + 0.25, 0.75 + 0.75 + 0.25))
    assert weighted_correct(correct, y, (counts > 0).double()) == pytest.approx((2.0, 3.0))


# ------------------------------------------------------------------------------------- federated runs
def digits_config(tmp_path, *overrides):
    return load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}", "data.num_clients=8",
                                                "train.fraction=0.5", "train.local_epochs=1", *overrides])


def test_fednh_learns_on_digits(tmp_path):
    cfg = digits_config(tmp_path, "algorithm.name=fednh", "train.rounds=6", "algorithm.fednh.scale=10",
                        "train.optimizer.momentum=0.9")
    history = run_in_process(cfg, prepare_data(cfg))
    for key in ("accuracy", "personalized_accuracy", "personalized_pm_l", "personalized_pm_v"):
        assert history[-1][key] > 0.1 and history[-1][key] > history[0][key], key
    assert "personalized_pm_v_client_std" in history[-1]


@pytest.mark.parametrize("name", ["fedavg_pm", "local_pm"])
def test_baselines_report_the_same_personalized_metrics(tmp_path, name):
    cfg = digits_config(tmp_path, f"algorithm.name={name}", "train.rounds=2")
    last = run_in_process(cfg, prepare_data(cfg))[-1]
    assert {"personalized_accuracy", "personalized_pm_l", "personalized_pm_v"} <= set(last)


def test_resume_restores_personal_state(tmp_path):
    cfg = digits_config(tmp_path, "algorithm.name=fednh", "train.rounds=4")
    data = prepare_data(cfg)
    ids = list(range(data.num_clients))

    def rounds(host, server, n):
        for _ in range(n):
            server.run_round(in_process_calls(host))

    straight_host, straight = ClientHost(cfg, data, ids), Server(cfg, data)
    rounds(straight_host, straight, 4)

    host, server = ClientHost(cfg, data, ids), Server(cfg, data)
    rounds(host, server, 2)
    assert any("model" in s for s in host.client_states().values())  # personal models are in the state
    snap = torch_load_safe(torch_bytes(server.snapshot()))
    states = torch_load_safe(torch_bytes(host.client_states()))
    resumed_host, resumed = ClientHost(cfg, data, ids, client_states=states), Server(cfg, data)
    resumed.restore(snap)
    rounds(resumed_host, resumed, 2)
    assert resumed.history == straight.history


def test_claims_config_runs_every_setting_and_method():
    cfg = load_config("configs/claims/fednh_digits.yaml")
    assert cfg.algorithm.name == "fednh" and cfg.checkpoint.every == 0
    for setting in cfg.claims.settings.values():
        for method in cfg.claims.methods.values():
            with_overrides(cfg, {**setting, **method})  # every combination validates
    names = set(cfg.claims.methods)
    assert all({c.method, c.baseline} <= names and c.setting in cfg.claims.settings for c in cfg.claims.checks)
