"""SCAFFOLD's control-variate update (docs/methods/scaffold.md) by hand on tiny tensors, its momentum form, and the
refusal of Adam."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from orchestrator.experiment.config import ConfigError, load_config
from tasks.algorithms.base import ClientUpdate, TrainSettings
from tests.method_fixtures import X, Y, client, context, one_step, tiny_method


def variates(method, value: float) -> dict[str, torch.Tensor]:
    return {k: torch.full_like(v, value) for k, v in method.init_client(None)["c"].items()}


def ce_gradient(method, start) -> dict[str, torch.Tensor]:
    model = method.new_model()
    model.load_state_dict(start)
    F.cross_entropy(model(X), Y).backward()
    return {k: p.grad for k, p in model.named_parameters()}


def test_one_client_one_step_the_new_variate_is_the_gradient_at_the_start():
    """y = x − η(g + c − c_i), so c_i⁺ = c_i − c + (x − y)/(1·η) = g(x): the plain gradient, whatever c and c_i."""
    train = one_step(lr=0.1)
    method = tiny_method("scaffold", train=train)
    state = method.init_global()
    state["c"] = variates(method, 0.3)
    payload, data = method.payload(state, 0), client()
    ctx = context(train, data)
    assert ctx.local_steps == 1
    update, new_state = method.client_update(payload, data, {"c": variates(method, -0.2)}, ctx)
    g = ce_gradient(method, state["model"])
    for name in g:
        expected_y = state["model"][name] - 0.1 * (g[name] + 0.3 - (-0.2))
        assert torch.allclose(update.tensors[name], expected_y, atol=1e-6), name
        assert torch.allclose(new_state["c"][name], g[name], atol=1e-5), name
        assert torch.allclose(update.stats["delta_c"][name], g[name] + 0.2, atol=1e-5), name
    # twice FedAvg's upload: the model's parameters again, as Δc
    assert update.bytes_sent == 2 * sum(t.numel() * 4 for n, t in update.tensors.items() if n in g)


def test_the_server_averages_models_and_adds_the_mean_variate_change_over_all_clients():
    method = tiny_method("scaffold", num_clients=4)
    state = method.init_global()
    names = list(state["c"])
    one = {k: torch.ones_like(v) for k, v in state["model"].items()}
    updates = [ClientUpdate(0, 1, tensors={k: 3 * v for k, v in one.items()},
                            stats={"delta_c": {k: torch.full_like(state["c"][k], 2.0) for k in names}}),
               ClientUpdate(1, 3, tensors={k: 1 * v for k, v in one.items()},
                            stats={"delta_c": {k: torch.full_like(state["c"][k], 6.0) for k in names}})]
    new = method.aggregate(state, updates, 0)
    for k in names:
        assert torch.allclose(new["model"][k], torch.full_like(one[k], (3 * 1 + 1 * 3) / 4))  # sample-weighted
        assert torch.allclose(new["c"][k], torch.full_like(state["c"][k], (2.0 + 6.0) / 4))  # ÷ N = 4 clients


def test_under_momentum_option_two_divides_by_the_momentum_weighted_step_count():
    """Two steps of momentum β on a batch: x − y = η((1 + β)·g₁' + g₂') with g' the corrected gradients, so
    c_i⁺ = c_i − c + (x − y)/(η·(2 + β))."""
    beta, lr = 0.5, 0.1
    train = TrainSettings(lr=lr, batch_size=3, local_epochs=2, momentum=beta)
    method = tiny_method("scaffold", train=train)
    state = method.init_global()
    data = client()
    update, new_state = method.client_update(method.payload(state, 0), data, method.init_client(data),
                                             context(train, data))
    for name, c in new_state["c"].items():
        expected = (state["model"][name] - update.tensors[name]) / (lr * (2 + beta))
        assert torch.allclose(c, expected, atol=1e-6), name


def test_adam_is_refused_in_one_line_and_momentum_is_announced(tmp_path):
    with pytest.raises(ConfigError, match="scaffold's update assumes plain SGD .* use train.optimizer.name=sgd"):
        load_config("configs/default.yaml", ["algorithm.name=scaffold", "train.optimizer.name=adam"])
    from orchestrator.experiment.method_settings import nonfinite_loss_advice, optimizer_note

    cfg = load_config("configs/default.yaml", ["algorithm.name=scaffold"])
    assert optimizer_note(cfg).startswith("scaffold under SGD momentum 0.9: option II divides")
    assert "train.optimizer.momentum=0" in nonfinite_loss_advice(cfg)
    plain = load_config("configs/default.yaml", ["algorithm.name=scaffold", "train.optimizer.momentum=0"])
    assert optimizer_note(plain) == "" and "lower train.optimizer.lr" in nonfinite_loss_advice(plain)


def test_a_non_finite_loss_under_momentum_names_the_optimizer(tmp_path):
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import NonFiniteLoss, run_in_process

    cfg = load_config("configs/default.yaml", ["algorithm.name=scaffold", "data.num_clients=3", "train.rounds=2",
                                               "train.optimizer.lr=1e30", f"data.partitions_dir={tmp_path}"])
    with pytest.raises(NonFiniteLoss, match=r"^round 1: client \d reported training loss .*; scaffold's update "
                                            r"assumes plain SGD and train.optimizer.momentum is 0.9: try "
                                            r"train.optimizer.momentum=0"):
        run_in_process(cfg, prepare_data(cfg))
