"""FedDyn's local objective, client state and server h state (docs/methods/feddyn.md) by hand on tiny tensors."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import run_in_process
from tasks.algorithms import TrainSettings
from tasks.algorithms.base import ClientUpdate
from tests.method_fixtures import X, Y, client, context, one_step, tiny_method


def test_one_step_the_state_update_and_the_server_by_hand():
    """From θ = x with gradient state g: one SGD step θ' = x − η(∇CE(x) − g) (the quadratic term's gradient is 0
    at x); g' = g − α(θ' − x). Server, one of m = 2 clients: h = −α·(θ' − x)/2, θ = θ' − h/α = θ' + (θ' − x)/2."""
    alpha, lr = 0.1, 0.5
    train = one_step(lr)
    method = tiny_method("feddyn", train=train, alpha=alpha)
    state, data = method.init_global(), client()
    g = {k: torch.full_like(v, 0.2) for k, v in method.init_client(data)["grad"].items()}
    update, new_client = method.client_update(method.payload(state, 0), data, {"grad": g}, context(train, data))
    model = method.new_model()
    model.load_state_dict(state["model"])
    F.cross_entropy(model(X), Y).backward()
    x = state["model"]
    for name, p in model.named_parameters():
        theta = x[name] - lr * (p.grad - 0.2)
        assert torch.allclose(update.tensors[name], theta, atol=1e-6), name
        assert torch.allclose(new_client["grad"][name], 0.2 - alpha * (theta - x[name]), atol=1e-6), name
    new = method.aggregate(state, [update], 0)
    for name in x:
        assert torch.allclose(new["h"][name], -alpha * (update.tensors[name] - x[name]) / 2, atol=1e-7)
        assert torch.allclose(new["model"][name], update.tensors[name] + (update.tensors[name] - x[name]) / 2,
                              atol=1e-6)


def test_the_server_mean_is_uniform_as_in_the_paper():
    method = tiny_method("feddyn", num_clients=2)
    state = method.init_global()
    updates = [ClientUpdate(c, n, tensors={k: v + c + 1 for k, v in state["model"].items()}) for c, n in ((0, 1), (1, 9))]
    new = method.aggregate(state, updates, 0)
    # mean of (x + 1, x + 2) = x + 1.5; h = −α·(1 + 2)/2 = −1.5α; θ = x + 1.5 + 1.5
    for name, v in state["model"].items():
        assert torch.allclose(new["model"][name], v + 3.0, atol=1e-6)


# --------------------------------------------------------- α per client (the authors' code: α / weight_list[k])
X9, Y9 = torch.cat([X, X, X]), torch.cat([Y, Y, Y])


def per_client_method(train, alpha: float):
    """FedDyn with alpha_per_client, set up with clients of 3 and 9 samples: n̄ = 6, so client 0's α_0 = α·6/3."""
    method = tiny_method("feddyn", train=train, alpha=alpha, alpha_per_client=True)
    state = method.server_setup(method.init_global(), [method.client_setup(client(0), None),
                                                       method.client_setup(client(1, X9, Y9), None)])
    return method, state


def test_the_local_objectives_gradient_uses_the_clients_own_alpha_by_hand():
    """∇[CE(θ) − ⟨g, θ⟩ + (α_k/2)‖θ − θ^{t−1}‖²] = ∇CE(θ) − g + α_k(θ − θ^{t−1}), α_k = α·n̄/n_k = 0.1·6/3 = 0.2,
    at a θ away from the anchor (the quadratic term's gradient shows)."""
    method, state = per_client_method(one_step(), alpha=0.1)
    assert float(state["mean_samples"]) == 6.0 and float(method.payload(state, 0)["mean_samples"]) == 6.0
    data = client(0)
    g = {k: torch.full_like(v, 0.2) for k, v in method.init_client(data)["grad"].items()}
    objective = method.local_objective(method.payload(state, 0), data, {"grad": g}, context(one_step(), data))
    assert float(objective.inputs["alpha"]) == pytest.approx(0.2)
    x = state["model"]
    params = {k: (v + 0.3).requires_grad_(True) for k, v in x.items()}
    model = method.new_model()
    h, logits = functional_call(model, params, (X,), {"return_features": True})
    grads = torch.autograd.grad(method.local_loss(params, X, Y, h, logits, objective.inputs), list(params.values()))
    ce_grads = torch.autograd.grad(F.cross_entropy(functional_call(model, params, (X,)), Y), list(params.values()))
    for (name, p), got, ce in zip(params.items(), grads, ce_grads):
        assert torch.allclose(got, ce - 0.2 + 0.2 * (p.detach() - x[name]), atol=1e-6), name


def ce_grad(model, theta: dict) -> dict:
    leaves = {k: v.clone().requires_grad_(True) for k, v in theta.items()}
    grads = torch.autograd.grad(F.cross_entropy(functional_call(model, leaves, (X,)), Y), list(leaves.values()))
    return dict(zip(theta, grads))


def test_two_steps_and_the_state_update_with_the_clients_own_alpha_by_hand():
    """Two full-batch SGD steps: θ₁ = x − η(∇CE(x) − g); θ₂ = θ₁ − η(∇CE(θ₁) − g + α_k(θ₁ − x)); g' = g − α_k(θ₂ − x),
    with α_k = 0.2 for the 3-sample client (n̄ = 6); the one-α method (α = 0.1) differs."""
    alpha, lr = 0.1, 0.5
    train = TrainSettings(lr=lr, batch_size=3, local_epochs=2)
    data = client(0)
    g = {k: torch.full_like(v, 0.2) for k, v in tiny_method("feddyn").init_client(data)["grad"].items()}
    results = {}
    for per_client in (True, False):
        if per_client:
            method, state = per_client_method(train, alpha)
        else:
            method = tiny_method("feddyn", train=train, alpha=alpha)
            state = method.server_setup(method.init_global(), [method.client_setup(client(0), None)])
            assert "mean_samples" not in state and set(method.payload(state, 0)) == {"model"}
        results[per_client] = method.client_update(method.payload(state, 0), data, {"grad": g}, context(train, data))
        x, model, alpha_k = state["model"], method.new_model(), 0.2 if per_client else alpha
        g1 = ce_grad(model, x)
        theta1 = {k: x[k] - lr * (g1[k] - 0.2) for k in x}
        g2 = ce_grad(model, theta1)
        theta2 = {k: theta1[k] - lr * (g2[k] - 0.2 + alpha_k * (theta1[k] - x[k])) for k in x}
        update, new_client = results[per_client]
        for name in x:
            assert torch.allclose(update.tensors[name], theta2[name], atol=1e-6), (per_client, name)
            assert torch.allclose(new_client["grad"][name], 0.2 - alpha_k * (theta2[name] - x[name]), atol=1e-6)
    assert any(not torch.allclose(results[True][0].tensors[k], results[False][0].tensors[k]) for k in g)


def test_per_client_alpha_runs_alike_on_both_engines(tmp_path):
    """A short in-process run with the set-up exchange: the vectorized engine stacks each client's α_k."""
    base = ["data.num_clients=4", "train.rounds=2", "algorithm.name=feddyn", f"data.partitions_dir={tmp_path}"]
    data = prepare_data(load_config("configs/default.yaml", base))
    runs = {engine: run_in_process(load_config("configs/default.yaml", [
        *base, "algorithm.feddyn.alpha_per_client=true", f"train.engine={engine}"]), data)
        for engine in ("sequential", "vectorized")}
    for seq, vec in zip(runs["sequential"], runs["vectorized"]):
        assert seq["train_loss"] == pytest.approx(vec["train_loss"], rel=1e-4)
    one_alpha = run_in_process(load_config("configs/default.yaml", [*base, "train.engine=sequential"]), data)
    assert one_alpha[-1]["train_loss"] != runs["sequential"][-1]["train_loss"]
