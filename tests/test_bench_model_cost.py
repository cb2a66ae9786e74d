"""The model-cost benchmarks' references do Mooring's training on Mooring's model (tiny versions of the CNN and
LSTM workloads), the new 28×28 dataset is the digits upsampled, and the report's figures are the rows' own (no
timing is asserted)."""
from __future__ import annotations

import copy

import pytest
import torch
from torch.nn.utils import parameters_to_vector

from benchmarks.bare_loop import load_flat, throwaway_round, train_rounds
from benchmarks.model_cost import CNN, LSTM, PLAIN, VECTORIZED, WORKLOADS, Row, report, workload_overrides
from benchmarks.model_loops import load_model_workload
from benchmarks.vectorized_loop import train_rounds_vectorized
from orchestrator.clients.client_host import ClientHost
from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import Server, in_process_calls

TINY = {"cnn": ["data.num_clients=12", "train.clients_per_round=4", "train.local_epochs=1", "model.hidden=16",
                "model.feature_dim=8", "model.channels=4"],
        "lstm": ["data.num_clients=6", "train.clients_per_round=3", "model.hidden=8", "data.text.seq_len=20",
                 "train.batch_size=64", "train.optimizer.lr=0.5"]}


@pytest.mark.parametrize("name", ["cnn", "lstm"])
def test_the_plain_and_the_vectorised_loop_reach_mooring_s_global_model_on_the_model_cost_workloads(workdir, name):
    """From the θ⁰ Mooring builds, on the batches Mooring draws, both references reach the global model of
    Mooring's sequential engine after two rounds (float32 summation order aside; under torch.func the LSTM runs
    step by step rather than in PyTorch's fused kernel), the throwaway round they are timed after included."""
    w = WORKLOADS[name]
    cfg = load_config(f"configs/{w.config}", workload_overrides(w, rounds=2) + TINY[name] + workdir
                      + ["train.engine=sequential"])
    data = prepare_data(cfg)
    server, host = Server(cfg, data), ClientHost(cfg, data, list(range(data.num_clients)))
    start = parameters_to_vector(list(server.state["model"].values())).clone()
    mooring_accuracies = [server.run_round(in_process_calls(host))["accuracy"] for _ in range(2)]
    mooring = parameters_to_vector(list(server.state["model"].values()))
    assert not torch.allclose(mooring, start, atol=1e-3)
    workload, model = load_model_workload(cfg)
    assert torch.equal(parameters_to_vector(model.parameters()), start)  # the same θ⁰ without loading it
    for train in (train_rounds, train_rounds_vectorized):
        trained = copy.deepcopy(model)
        throwaway_round(train, trained, workload)  # as the timed loops run first: leaves θ⁰ and the rounds as they were
        ends: list[float] = []
        accuracies = train(trained, workload, ends)
        assert torch.allclose(parameters_to_vector(trained.parameters()), mooring, atol=5e-5), train.__name__
        assert accuracies == pytest.approx(mooring_accuracies, abs=1e-6), train.__name__
        assert len(ends) == 2 and ends[0] <= ends[1]
        load_flat(list(trained.parameters()), start)  # load_flat leaves θ⁰ exactly
        assert torch.equal(parameters_to_vector(trained.parameters()), start)


def test_digits_28_is_the_digits_upsampled_to_28_by_28(workdir):
    small = prepare_data(load_config("configs/default.yaml", workdir))
    large = prepare_data(load_config("configs/default.yaml", workdir + ["data.dataset=digits_28"]))
    assert large.input_shape == (1, 28, 28) and small.input_shape == (1, 8, 8)
    x8, y8 = next(iter(small.test_sets().values()))
    x28, y28 = next(iter(large.test_sets().values()))
    assert torch.equal(y8, y28)  # the same samples and split
    # bilinear: each pixel a convex combination of the 8×8 image's pixels, a corner its corner pixel
    assert torch.all(x28.amax(dim=(1, 2, 3)) <= x8.amax(dim=(1, 2, 3)))
    assert torch.all(x28.amin(dim=(1, 2, 3)) >= x8.amin(dim=(1, 2, 3)))
    assert torch.all(x28.std(dim=(1, 2, 3)) > 0.1)
    corner = x8[:, 0, 0, 0] == 0
    assert torch.all(x28[corner, 0, 0, 0] == 0)


def test_a_row_s_time_to_target_is_its_rounds_up_to_the_first_round_at_the_target():
    row = Row([3.0, 1.0, 2.0, 4.0], [0.2, 0.81, 0.5, 0.9])
    assert row.seconds_to(0.8) == 4.0 and row.seconds_to(0.85) == 10.0 and row.seconds_to(0.95) is None
    assert row.round_at(0.8) == 2 and row.round_at(0.85) == 4 and row.round_at(0.95) is None
    assert row.per_round() == 3.0  # rounds 3 and 4: the first two are warm-up


def test_the_model_cost_report_sets_each_row_against_both_loops_and_its_target():
    plain, vec = Row([1.0, 1.0, 1.0, 1.0], [0.1, 0.9, 0.9, 0.9]), Row([1.0, 1.0, 0.5, 0.5], [0.1, 0.9, 0.9, 0.9])
    m = {"workload": CNN.name, "rounds": 4, "repeats": 1, "command": "mooring bench cnn",
         "rows": {PLAIN: plain, VECTORIZED: vec, "Mooring, 1 actor, engine sequential": Row([2, 2, 0.9, 0.9],
                                                                                        [0.1, 0.9, 0.9, 0.9]),
                  "Mooring, 2 actors, engine sequential": Row([1, 0.5, 0.5, 0.5], [0.1, 0.5, 0.85, 0.9])},
         "targets": {"Mooring, 1 actor, engine sequential": 1.0, "Mooring, 2 actors, engine sequential": 0.6}}
    text = report(m)
    assert "| Mooring, 1 actor, engine sequential | 0.900 | 0.90 | 1.80 | 4.00 (round 2) | 2.00 | 2.00 | 0.900 | " \
           "≤ 1.0 × the plain loop: not met |" in text  # faster a round, slower to the target
    assert "| Mooring, 2 actors, engine sequential | 0.500 | 0.50 | 1.00 | 2.00 (round 3) | 1.00 | 1.00 | 0.900 | " \
           "≤ 0.6 × the plain loop: not met |" in text
    assert f"s to {CNN.target:.1%} accuracy" in text and "Reproduce: `mooring bench cnn`" in text
    assert LSTM.title.startswith("char_rnn with `cell: lstm`")


def test_bench_passes_the_cnn_and_lstm_options_to_their_measure():
    import argparse

    from orchestrator.commands.bench import configure, measure_options

    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["lstm", "--rounds", "3", "--actors", "1", "--engine", "sequential", "--set", "a.b=1"])
    assert measure_options("lstm", args) == [{"rounds": 3, "actors": (1,), "engines": ("sequential",),
                                              "mooring_overrides": ("a.b=1",)}]
    assert measure_options("cnn", parser.parse_args(["cnn"])) == [{}]  # the workload's own rounds, both engines


def test_a_row_meets_its_target_only_within_it_both_per_round_and_to_the_accuracy():
    from benchmarks.model_cost import verdict

    plain = Row([1.0, 1.0, 1.0, 1.0], [0.1, 0.9, 0.9, 0.9])
    assert verdict(Row([1.0, 1.0, 0.5, 0.5], [0.9] * 4), plain, 0.8, 0.6).endswith(": met")
    assert verdict(Row([2.0, 2.0, 0.5, 0.5], [0.1, 0.9, 0.9, 0.9]), plain, 0.8, 0.6).endswith("not met")
    assert verdict(Row([0.1] * 4, [0.1] * 4), plain, 0.8, 0.6).endswith("not met")  # never reached
