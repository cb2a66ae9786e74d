"""Tiny set-ups for the hand-computed tests of a method's update: a 3-input, 2-class MLP without hidden layers,
one client's data and one round's context."""
from __future__ import annotations

import torch

from tasks.algorithms import ALGORITHMS, RoundContext, Setup, TrainSettings
from tasks.algorithms.base import ClientData
from tasks.algorithms.local_sgd import local_step_count

X = torch.tensor([[1.0, 0.0, 2.0], [0.5, -1.0, 0.0], [0.0, 1.0, 1.0]])
Y = torch.tensor([0, 1, 1])


def tiny_method(name: str, num_clients: int = 2, train: TrainSettings | None = None, **params):
    """Method `name` on a Linear(3, 2)-ReLU-Linear(2, 2) model."""
    method = ALGORITHMS.get(name)
    setup = Setup(num_classes=2, input_shape=(3,), num_clients=num_clients, model_name="mlp",
                  model_options={"hidden": [], "feature_dim": 2}, train=train or TrainSettings())
    return method(method.Params(**params), setup)


def client(cid: int = 0, x: torch.Tensor = X, y: torch.Tensor = Y) -> ClientData:
    return ClientData(cid, x, y, x[:0], y[:0], num_classes=2)


def context(train: TrainSettings, data: ClientData, round_idx: int = 0) -> RoundContext:
    return RoundContext(round_idx, 0, train, torch.Generator().manual_seed(0),
                        local_steps=local_step_count(data.num_samples, train))


def one_step(lr: float = 0.1) -> TrainSettings:
    """Plain SGD, one full batch of the three samples: one step."""
    return TrainSettings(lr=lr, batch_size=3, local_epochs=1)
