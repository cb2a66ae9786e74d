"""MOON: the model-contrastive loss against a hand computation, the previous local model as client state,
gradients only into the local model, and a short federated run on digits."""
from __future__ import annotations

import math

import pytest
import torch

from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import run_in_process
from tasks.algorithms import ALGORITHMS, ClientData, RoundContext, Setup, TrainSettings
from tasks.algorithms.base import NoParams, state_of
from tasks.algorithms.moon import Moon, MoonParams, moon_loss, previous_local_model


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def softplus(v: float) -> float:
    return math.log1p(math.exp(v))


def algorithm(seed: int = 0, **params) -> Moon:
    setup = Setup(num_classes=10, input_shape=(1, 2, 2), num_clients=2, model_name="mlp",
                  model_options={"hidden": [8], "feature_dim": 4}, train=TrainSettings(lr=0.1, local_steps=3), seed=seed)
    return Moon(MoonParams(**params), setup)


def client(cid: int = 0) -> ClientData:
    gen = torch.Generator().manual_seed(cid)
    x, y = torch.randn(12, 1, 2, 2, generator=gen), torch.arange(12) % 10
    return ClientData(cid, x, y, x[:0], y[:0], num_classes=10)


def context(algo: Moon, round_idx: int = 0) -> RoundContext:
    return RoundContext(round=round_idx, seed=0, train=algo.setup.train, generator=torch.Generator().manual_seed(7))


def test_moon_loss_by_hand():
    z = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    z_glob = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])  # cos with z: 1, 1/√2
    z_prev = torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])  # cos with z: 0, 1/√2
    # τ = 0.25 divides: row 1 −log(e^4 / (e^4 + e^0)) = softplus(−4); row 2 equal logits: log 2
    expected = (softplus(-4.0) + math.log(2.0)) / 2
    assert moon_loss(z, z_glob, z_prev, 0.25).item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(0.3556486, rel=1e-6)


def test_previous_local_model_is_the_global_model_on_first_participation():
    payload = {"model": {"w": torch.zeros(1)}}
    assert previous_local_model({}, payload) is payload["model"]
    mine = {"w": torch.ones(1)}
    assert previous_local_model({"prev_model": mine}, payload) is mine


def test_client_keeps_its_trained_model_as_the_next_previous_model():
    algo = algorithm()
    payload = {"model": state_of(algo.new_model())}
    update, state = algo.client_update(payload, client(), {}, context(algo))
    assert set(state["prev_model"]) == set(payload["model"])
    assert all(torch.equal(state["prev_model"][k], v) for k, v in update.tensors.items())
    assert any(not torch.equal(payload["model"][k], v) for k, v in update.tensors.items())


def test_only_the_local_model_receives_gradients():
    algo = algorithm(mu=1.0)
    payload = {"model": state_of(algo.new_model())}
    prev = {k: v + 0.1 for k, v in payload["model"].items()}
    algo.client_update(payload, client(), {"prev_model": prev}, context(algo, 1))
    assert all(p.grad is not None for p in algo.working_model(key="global").parameters())
    for key in ("moon_global", "moon_prev"):
        assert all(p.grad is None for p in algo.working_model(key=key).parameters())


def test_contrastive_term_changes_the_update_and_mu_zero_is_fedavg():
    payload = {"model": state_of(algorithm().new_model())}
    prev = {k: v + 0.1 for k, v in payload["model"].items()}  # a previous model different from the global one
    fedavg = ALGORITHMS.get("fedavg")(NoParams(), algorithm().setup)
    plain, _ = fedavg.client_update(payload, client(), {}, context(algorithm()))
    results = {}
    for mu in (0.0, 5.0):
        algo = algorithm(mu=mu)
        results[mu], _ = algo.client_update(payload, client(), {"prev_model": prev}, context(algo))
    assert all(torch.allclose(plain.tensors[k], v) for k, v in results[0.0].tensors.items())
    assert any(not torch.allclose(plain.tensors[k], v) for k, v in results[5.0].tensors.items())


def test_moon_learns_on_digits(tmp_path):
    cfg = load_config("configs/default.yaml", ["algorithm.name=moon", "train.rounds=5", "train.local_steps=10",
                                               "train.optimizer.lr=0.1", "tracking.enabled=false",
                                               f"data.partitions_dir={tmp_path}"])
    acc = [r["accuracy"] for r in run_in_process(cfg, prepare_data(cfg))]
    assert acc[-1] > 0.1 and acc[-1] > acc[0]


def test_search_ranges():
    space = MoonParams.search_space()
    assert space["mu"]["low"] <= 0.01 and space["mu"]["high"] >= 5 and space["mu"]["log"]
    assert (space["tau"]["low"], space["tau"]["high"]) == (0.1, 1.0)
