"""FedBN keeps BatchNorm local (docs/methods/fedbn.md): on tiny tensors, the BN layers' tensors never leave their
client, the rest is averaged, and each client is evaluated with its own."""
from __future__ import annotations

import torch

from tasks.algorithms import ALGORITHMS, Setup, TrainSettings
from tasks.algorithms.base import ClientData, weighted_average
from tasks.algorithms.fedbn import batchnorm_keys
from tests.method_fixtures import context


def fedbn():
    setup = Setup(num_classes=2, input_shape=(1, 4, 4), num_clients=2, model_name="digits_cnn_bn",
                  model_options={"channels": [2], "feature_dim": 3}, train=TrainSettings(lr=0.1, batch_size=4))
    return ALGORITHMS.get("fedbn")(ALGORITHMS.get("fedbn").Params(), setup)


def shard(cid: int, shift: float) -> ClientData:
    g = torch.Generator().manual_seed(cid)
    x = torch.randn(6, 1, 4, 4, generator=g) + shift  # two feature-shifted domains
    y = torch.tensor([0, 1, 0, 1, 0, 1])
    return ClientData(cid, x, y, x[:4], y[:4], num_classes=2)


def test_batchnorm_stays_on_its_client_and_the_rest_is_averaged():
    method = fedbn()
    keys = batchnorm_keys(method.working_model())
    assert keys and any(k.endswith("running_mean") for k in keys) and any(k.endswith("weight") for k in keys)
    state = method.init_global()
    payload = method.payload(state, 0)
    results = [method.client_update(payload, d, {}, context(method.setup.train, d))
               for d in (shard(0, 0.0), shard(1, 3.0))]
    updates, states = [u for u, _ in results], [s for _, s in results]
    for update, client_state in zip(updates, states):
        assert not keys & set(update.tensors) and set(client_state["bn"]) == keys
    mean0 = states[0]["bn"][next(k for k in keys if k.endswith("running_mean"))]
    mean1 = states[1]["bn"][next(k for k in keys if k.endswith("running_mean"))]
    assert not torch.allclose(mean0, mean1)  # each client's own statistics
    new = method.aggregate(state, updates, 0)
    expected = weighted_average([u.tensors for u in updates], [6, 6])
    for k, v in new["model"].items():
        assert torch.equal(v, state["model"][k] if k in keys else expected[k]), k
    # the next round starts from the averaged rest with the client's own BatchNorm tensors
    start = method.local_objective(method.payload(new, 1), shard(1, 3.0), states[1], None).start
    assert all(torch.equal(start[k], states[1]["bn"][k]) for k in keys)
    assert method.client_evaluate(method.payload(new, 1), shard(1, 3.0), states[1], context(method.setup.train,
                                                                                            shard(1, 3.0)))["acc"][1] == 4
