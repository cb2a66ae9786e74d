"""The server and client halves of the baselines against hand computations."""
from __future__ import annotations

from dataclasses import replace

import torch

from orchestrator.server.sampling import sample_clients
from tasks.algorithms.base import ClientUpdate, Setup, local_batches, nbytes, weighted_average
from tasks.algorithms.fedavg import FedAvg
from tasks.algorithms.fedprox import proximal_term


def test_weighted_average_matches_hand_computation():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([4.0, -1.0]), "n": torch.tensor(7)}
    out = weighted_average([a, b], [1, 3])
    # (1·[1, 2] + 3·[4, −1]) / 4 = [13/4, −1/4]; integer buffers are copied, not averaged
    assert torch.equal(out["w"], torch.tensor([3.25, -0.25]))
    assert out["n"].item() == 3


def test_fedavg_aggregate_is_sample_weighted():
    setup = Setup(num_classes=2, input_shape=(1,), num_clients=2, model_name="mlp")
    ups = [ClientUpdate(0, 10, {"w": torch.tensor([0.0])}), ClientUpdate(1, 30, {"w": torch.tensor([4.0])})]
    assert FedAvg(FedAvg.Params(), setup).aggregate({"model": None}, ups, 0)["model"]["w"].item() == 3.0  # (10·0 + 30·4)/40
    uniform = FedAvg(FedAvg.Params(), replace(setup, averaging="uniform"))  # algorithm.averaging: uniform
    assert uniform.aggregate({"model": None}, ups, 0)["model"]["w"].item() == 2.0  # (0 + 4)/2


def test_fedprox_proximal_gradient_is_mu_times_distance():
    model = torch.nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0]]))
        model.bias.fill_(0.5)
    anchor = {"weight": torch.tensor([[0.0, 1.0]]), "bias": torch.tensor([1.5])}
    term = proximal_term(dict(model.named_parameters()), anchor, mu=0.1)
    # (0.1/2)·((1−0)² + (−2−1)² + (0.5−1.5)²) = 0.05·11
    assert torch.isclose(term, torch.tensor(0.55))
    term.backward()
    assert torch.allclose(model.weight.grad, torch.tensor([[0.1, -0.3]]))
    assert torch.allclose(model.bias.grad, torch.tensor([-0.1]))


def test_client_sampling_depends_only_on_seed_and_round():
    a = sample_clients(7, 3, 100, 10)
    assert a == sample_clients(7, 3, 100, 10) and len(set(a)) == 10 and a == sorted(a)
    assert a != sample_clients(7, 4, 100, 10) and a != sample_clients(8, 3, 100, 10)
    assert sample_clients(7, 3, 5, 10) == [0, 1, 2, 3, 4]


def test_bytes_count_every_tensor():
    assert nbytes({"a": torch.zeros(3, dtype=torch.float32), "b": [torch.zeros(2, dtype=torch.float64)]}) == 12 + 16
    assert ClientUpdate(0, 1, {"w": torch.zeros(4)}, {"s": torch.zeros(2)}).bytes_sent == 24


def test_local_steps_draw_batches_with_replacement_and_epochs_cover_all():
    from tasks.algorithms.base import ClientData, RoundContext, TrainSettings

    data = ClientData(0, torch.arange(10.0)[:, None], torch.arange(10), torch.zeros(0, 1), torch.zeros(0), 10)
    epochs = RoundContext(0, 0, TrainSettings(local_epochs=2, batch_size=4), torch.Generator().manual_seed(0))
    seen = torch.cat([y for _, y in local_batches(data, epochs)])
    assert sorted(seen.tolist()) == sorted(list(range(10)) * 2)
    steps = RoundContext(0, 0, TrainSettings(local_steps=3, batch_size=4), torch.Generator().manual_seed(0))
    assert [len(y) for _, y in local_batches(data, steps)] == [4, 4, 4]
