"""`model.init` / `model.head_init`: each scheme draws the distribution it names, biases are zeroed where
promised, the config validates the names and logs them, and every method of a seed starts from the same θ⁰."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from orchestrator.experiment.config import ConfigError, load_config
from orchestrator.experiment.methods import build_algorithm
from orchestrator.reporting.results import run_params
from tasks.models import build_model

FAN_IN, HIDDEN, FEATURES = 256, 512, 256  # the MLP's first Linear is 256 → 512, its head 256 → 10

EXPECTED_STD = {  # fan_in, fan_out -> std of the weights
    "torch_default": lambda i, o: 1 / math.sqrt(3 * i),  # U(±1/√fan_in)
    "he_normal": lambda i, o: math.sqrt(2 / i),
    "he_uniform": lambda i, o: math.sqrt(2 / i),  # U(±√(6/fan_in))
    "xavier_uniform": lambda i, o: math.sqrt(2 / (i + o)),
    "xavier_normal": lambda i, o: math.sqrt(2 / (i + o)),
    "lecun_normal": lambda i, o: math.sqrt(1 / i),
}


def mlp(init: str, head_init: str | None = None, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model("mlp", (1, 16, 16), 10, {"hidden": [HIDDEN], "feature_dim": FEATURES}, init, head_init)


def linears(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


@pytest.mark.parametrize("scheme", sorted(EXPECTED_STD))
def test_each_scheme_draws_the_distribution_it_names(scheme):
    first = linears(mlp(scheme))[0]
    w = first.weight.detach().double()
    expected = EXPECTED_STD[scheme](FAN_IN, HIDDEN)
    assert abs(float(w.mean())) < 0.02 * expected  # 131k draws: the standard error of the mean is 0.003 σ
    assert float(w.std()) == pytest.approx(expected, rel=0.03)
    if scheme == "torch_default":
        assert float(first.bias.detach().abs().max()) > 0  # PyTorch's own bias draw is kept
    else:
        assert torch.count_nonzero(first.bias) == 0


@pytest.mark.parametrize("scheme", ["he_uniform", "xavier_uniform"])
def test_uniform_schemes_stay_within_their_bound(scheme):
    w = linears(mlp(scheme))[0].weight.detach()
    bound = math.sqrt(3) * EXPECTED_STD[scheme](FAN_IN, HIDDEN)
    assert float(w.abs().max()) <= bound
    assert float(w.abs().max()) > 0.99 * bound


def test_head_init_applies_to_the_classifier_alone():
    """docs/methods/fednh.md §12.1: He-normal body, zero biases, N(0, 1/d) head."""
    model = mlp("he_normal", "lecun_normal")
    head = model.classifier.weight.detach().double()
    assert float(head.std()) == pytest.approx(1 / math.sqrt(FEATURES), rel=0.05)
    assert torch.count_nonzero(model.classifier.bias) == 0
    body = linears(model)[1]  # 512 → 256 body layer: He-normal, not the head's scheme
    assert float(body.weight.detach().std()) == pytest.approx(math.sqrt(2 / HIDDEN), rel=0.03)


def test_conv_layers_use_their_receptive_field_as_fan_in():
    torch.manual_seed(0)
    model = build_model("digits_cnn", (1, 8, 8), 10, {"channels": [64, 64]}, "he_normal")
    conv = [m for m in model.modules() if isinstance(m, nn.Conv2d)][1]  # 64·3·3 inputs per output
    assert float(conv.weight.detach().std()) == pytest.approx(math.sqrt(2 / (64 * 9)), rel=0.03)
    assert torch.count_nonzero(conv.bias) == 0


def test_the_same_seed_gives_the_same_weights_and_another_seed_others():
    a, b, c = mlp("he_normal", seed=3), mlp("he_normal", seed=3), mlp("he_normal", seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.classifier.weight, c.classifier.weight)


@pytest.mark.parametrize("init", [[], ["model.init=he_normal", "model.head_init=lecun_normal"]])
def test_every_method_of_a_seed_starts_from_the_same_global_model(init):
    states = []
    for name in ("fedavg", "fedprox", "moon", "fedfa", "fedfm", "feddebias"):
        cfg = load_config("configs/default.yaml", [f"algorithm.name={name}", *init])
        states.append(build_algorithm(cfg, 10, (1, 8, 8)).init_global()["model"])
    shared = set.intersection(*(set(s) for s in states))
    assert {"classifier.weight", "body.1.weight"} <= shared
    for state in states[1:]:
        assert all(torch.equal(state[k], states[0][k]) for k in shared)
    other = build_algorithm(load_config("configs/default.yaml", ["seed=1", *init]), 10, (1, 8, 8)).init_global()
    assert not torch.equal(other["model"]["classifier.weight"], states[0]["classifier.weight"])


def test_the_config_validates_the_scheme_names_and_the_run_logs_them():
    with pytest.raises(ConfigError, match=r"model.init = 'orthogonal': unknown initialisation; allowed: torch_default"):
        load_config("configs/default.yaml", ["model.init=orthogonal"])
    with pytest.raises(ConfigError, match=r"model.head_init = 'he': unknown initialisation"):
        load_config("configs/default.yaml", ["model.head_init=he"])
    params = run_params(load_config("configs/default.yaml", ["model.init=xavier_uniform"]))
    assert params["model.init"] == "xavier_uniform" and params["model.head_init"] == "lecun_normal"
