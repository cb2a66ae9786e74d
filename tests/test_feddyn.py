"""FedDyn's local objective, client state and server h state (docs/methods/feddyn.md) by hand on tiny tensors."""
from __future__ import annotations

import torch
import torch.nn.functional as F

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
