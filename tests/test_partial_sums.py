"""resources.partial_sums: client hosts return Σ n_k·θ_k of each group of clients instead of each model
(FedAvg-style methods). What holds: against per-client aggregation the global model agrees to float32 rounding;
the logged bytes do not change. Across numbers of actors the history is bitwise the same
(tests/test_client_groups.py)."""
from __future__ import annotations

import pytest
import torch

from orchestrator.clients.client_host import ClientHost
from orchestrator.clients.partial_sums import fold_partial_sums, sum_updates
from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import Server, in_process_calls
from tasks.algorithms import ClientUpdate

FAST = ["train.rounds=3", "train.local_epochs=1", "data.num_clients=6", "checkpoint.every=0",
        "data.partition.kind=iid", "train.optimizer.weight_decay=0"]


def update(cid: int, n: int, w: list[float], steps: int = 0) -> ClientUpdate:
    return ClientUpdate(cid, n, tensors={"w": torch.tensor(w), "steps": torch.tensor(steps)}, metrics={"train_loss": 1.0})


def test_a_partial_sum_is_the_hand_computed_weighted_sum_and_strips_the_models():
    summed, (partial,) = sum_updates({3: update(3, 3, [3.0, -1.0], steps=9), 1: update(1, 1, [1.0, 2.0], steps=4)})
    assert partial.first_client == 1 and partial.weight == 4.0
    assert torch.equal(partial.sums["w"], torch.tensor([1 * 1.0 + 3 * 3.0, 1 * 2.0 + 3 * -1.0], dtype=torch.float64))
    assert torch.equal(partial.buffers["steps"], torch.tensor(4))  # the first client's integer buffer, as FedAvg
    assert partial.bytes_sent == 2 * (2 * 4 + 8)
    assert sorted(summed) == [1, 3] and all(u.tensors == {} and u.metrics == {"train_loss": 1.0} for u in summed.values())


def test_a_partial_sum_is_bitwise_the_float64_sum_of_each_model_times_its_sample_count():
    """Each client's float32 model times its sample count, converted to float64 and added in client order: the
    sum `sum_updates` takes in place must be this one to the bit (it is what the history depends on)."""
    gen = torch.Generator().manual_seed(0)
    counts = {0: 1, 1: 7, 2: 1000, 3: 123_457}
    clients = {cid: update(cid, n, (torch.randn(4096, generator=gen) * 10.0 ** (cid - 2)).tolist())
               for cid, n in counts.items()}
    expected = torch.zeros(4096, dtype=torch.float64)
    for cid, n in counts.items():
        expected = expected + clients[cid].tensors["w"].to(torch.float64) * n
    assert torch.equal(sum_updates(clients)[1][0].sums["w"], expected)


def test_folding_partials_in_any_split_gives_the_weighted_mean():
    clients = {0: update(0, 1, [1.0]), 1: update(1, 3, [3.0]), 2: update(2, 4, [0.5])}
    whole = sum_updates(dict(clients))[1]
    split = sum_updates({0: clients[0], 2: clients[2]})[1] + sum_updates({1: clients[1]})[1]
    expected = torch.tensor([(1 * 1.0 + 3 * 3.0 + 4 * 0.5) / 8])
    reference = {"w": torch.zeros(1), "steps": torch.tensor(0)}
    assert torch.equal(fold_partial_sums(whole, reference)["w"], expected)
    assert torch.equal(fold_partial_sums(split[::-1], reference)["w"], expected)  # folded by first client, any order


def test_partial_sums_agree_with_per_client_aggregation_in_process(workdir):
    states = {}
    for summed in (False, True):
        cfg = load_config("configs/default.yaml", FAST + workdir + [f"resources.partial_sums={str(summed).lower()}"])
        data = prepare_data(cfg)
        server, host = Server(cfg, data), ClientHost(cfg, data, list(range(data.num_clients)))
        assert server.summed is summed
        history = [server.run_round(in_process_calls(host)) for _ in range(3)]
        states[summed] = (server.state["model"], [(m["bytes_up"], m["bytes_down"]) for m in history])
    for key, value in states[False][0].items():
        assert torch.allclose(value, states[True][0][key], rtol=0, atol=1e-6)
    assert states[False][1] == states[True][1]  # each client's model is still counted as sent


@pytest.mark.parametrize("name, summed", [("fedavg", True), ("fedprox", True), ("moon", True), ("fedfa", False),
                                           ("fednh", False), ("local", False)])
def test_only_methods_that_average_as_fedavg_does_sum(workdir, name, summed):
    cfg = load_config("configs/default.yaml", FAST + workdir + ["resources.partial_sums=true", f"algorithm.name={name}"])
    assert Server(cfg, prepare_data(cfg)).summed is summed


def test_partial_sums_are_the_default_and_step_aside_for_the_diagnostics(workdir):
    """eval.diagnostics reads each client's model (the classifier-update cosine, the feature distance)."""
    default = load_config("configs/default.yaml", FAST + workdir)
    assert default.resources.partial_sums and Server(default, prepare_data(default)).summed
    diagnosed = load_config("configs/default.yaml", FAST + workdir + ["eval.diagnostics=true"])
    assert not Server(diagnosed, prepare_data(diagnosed)).summed
