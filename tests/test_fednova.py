"""FedNova's normalised averaging (docs/methods/fednova.md) by hand with unequal local steps."""
from __future__ import annotations

import pytest
import torch

from orchestrator.experiment.config import ConfigError, load_config
from tasks.algorithms.base import ClientUpdate, TrainSettings
from tests.method_fixtures import client, context, tiny_method


def filled(state, value: float) -> dict[str, torch.Tensor]:
    return {k: torch.full_like(v, value) for k, v in state.items()}


def test_unequal_steps_are_normalised_before_averaging():
    """x = 0; client 1 took 2 steps to −4, client 2 one step to −1, equal weights: d = (2, 1), τ_eff = 1.5,
    x⁺ = 0 − 1.5·(2 + 1)/2 = −2.25 (FedAvg would give −2.5)."""
    method = tiny_method("fednova")
    state = {**method.init_global()}
    state["model"] = filled(state["model"], 0.0)
    updates = [ClientUpdate(0, 5, tensors=filled(state["model"], -4.0), stats={"steps": torch.tensor(2.0)}),
               ClientUpdate(1, 5, tensors=filled(state["model"], -1.0), stats={"steps": torch.tensor(1.0)})]
    new = method.aggregate(state, updates, 0)
    for name, value in new["model"].items():
        assert torch.allclose(value, torch.full_like(value, -2.25)), name


def test_equal_steps_give_fedavgs_weighted_mean():
    method = tiny_method("fednova")
    state = method.init_global()
    updates = [ClientUpdate(0, 1, tensors=filled(state["model"], 3.0), stats={"steps": torch.tensor(4.0)}),
               ClientUpdate(1, 3, tensors=filled(state["model"], 1.0), stats={"steps": torch.tensor(4.0)})]
    for value in method.aggregate(state, updates, 0)["model"].values():
        assert torch.allclose(value, torch.full_like(value, 1.5))


def test_a_client_reports_its_momentum_weighted_steps():
    train = TrainSettings(lr=0.1, batch_size=2, local_epochs=1, momentum=0.5)  # 3 samples: 2 steps
    method = tiny_method("fednova", train=train)
    data = client()
    update, _ = method.client_update(method.payload(method.init_global(), 0), data, {}, context(train, data))
    assert float(update.stats["steps"]) == pytest.approx(2.5)  # (1 + β) + 1


def test_adam_is_refused():
    with pytest.raises(ConfigError, match="fednova's update assumes plain SGD"):
        load_config("configs/default.yaml", ["algorithm.name=fednova", "train.optimizer.name=adam"])
