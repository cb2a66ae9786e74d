"""A round's end starts the next round's training (`Server.run_round`'s `begin`): on client actors the coordinator's
evaluation of round t then overlaps round t + 1's training. The history is the one of rounds run one after the
other, and a method whose round's end touches what the next round's clients get never starts ahead."""
from __future__ import annotations

import pytest
import torch

from orchestrator.clients.client_calls import CallKind, ClientCall, ClientResults
from orchestrator.clients.client_host import ClientHost
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import Server
from tests.test_client_groups import assert_same_state
from tests.test_engines import tiny


def history(cfg, data, ahead: bool):
    """The run's rounds in this process; with `ahead`, every round but the last begins the next one's training,
    which runs only when that round asks for its results (after this round's evaluation). Returns the history,
    the final state, and the rounds begun ahead."""
    host = ClientHost(cfg, data, list(range(data.num_clients)))
    server = Server(cfg, data)
    if not server.set_up:
        contributions = host.call(ClientCall(CallKind.SETUP, None, list(range(data.num_clients)), 0)).results
        server.setup([contributions[c] for c in sorted(contributions)])
    begun: list[int] = []

    def begin(call: ClientCall):
        begun.append(call.round)
        return lambda: host.call(call)

    rounds = [server.run_round(host.call, begin if ahead and t < cfg.train.rounds - 1 else None)
              for t in range(cfg.train.rounds)]
    return rounds, server.state, begun


@pytest.mark.parametrize("name, starts_ahead", [
    ("fedavg", True), ("fedprox", True), ("fedavgm", True), ("fednova", True), ("fedfa", True), ("fedproc", True),
    ("groupdro", True), ("dann", True), ("mixup", True),
    ("scaffold", False), ("ditto", False), ("fedfm", False), ("fedavg_periodic", False)])
def test_rounds_begun_ahead_give_the_history_of_rounds_one_after_another(tmp_path, name, starts_ahead):
    cfg = tiny(tmp_path, f"algorithm.name={name}", "train.rounds=3", "train.clients_per_round=4")
    data = prepare_data(cfg)
    one_by_one, state, begun = history(cfg, data, ahead=False)
    assert begun == []
    overlapped, overlapped_state, begun = history(cfg, data, ahead=True)
    assert begun == ([1, 2] if starts_ahead else []), name
    assert overlapped == one_by_one, name
    assert_same_state(overlapped_state, state, name)


def test_a_round_begun_but_never_asked_for_leaves_no_trace(tmp_path):
    """A stop after round 1 (the driver asks for no more) leaves round 2's training begun: the server's state and
    history are round 1's, and a later round 2 (a resumed run's) is the one of an uninterrupted run."""
    cfg = tiny(tmp_path, "train.rounds=2", "train.clients_per_round=4")
    data = prepare_data(cfg)
    expected, expected_state, _ = history(cfg, data, ahead=False)
    host = ClientHost(cfg, data, list(range(data.num_clients)))
    server = Server(cfg, data)
    never_awaited: list[ClientResults] = []
    first = server.run_round(host.call, lambda call: lambda: never_awaited.append(host.call(call)))
    assert first == expected[0] and server.round == 1 and server.started is not None
    resumed = Server(cfg, data)
    resumed.restore(server.snapshot())
    assert resumed.run_round(host.call) == expected[1] and never_awaited == []
    assert_same_state(resumed.state, expected_state, "resumed")


SENT_AHEAD = "sent ahead of the next round's training"


@pytest.mark.ray
def test_a_large_models_run_on_actors_has_the_history_of_one_in_the_coordinator(ray_session, workdir):
    """acar_cnn (a large model: client groups of 8 steps, so a round spreads over the client actors, and each
    round's end begins the next round's training there) on 2 actors, its evaluation in the coordinator or split
    over the actors ahead of their training, and in the coordinator: the same history, bitwise."""
    from orchestrator.driver.run import run_experiment
    from orchestrator.experiment.config import load_config

    def run(*where: str):
        cfg = load_config("configs/default.yaml", workdir + [
            "data.dataset=digits_28", "model.name=acar_cnn", "model.hidden=64", "model.feature_dim=32",
            "data.num_clients=6", "train.clients_per_round=4", "train.rounds=3", "train.local_epochs=1",
            "resources.cpus_per_actor=0.5", *where])
        result = run_experiment(cfg, progress=False)
        model = torch.load(f"{result.run_dir}/final_state.pt", weights_only=True)["model"]
        phases = result.phases
        on_actors = [len(phases.get(f"evaluate: {p}", [])) for p in ("on the client actors", SENT_AHEAD)]
        return result.history, model, on_actors

    history, model, _ = run("resources.clients_on=coordinator")
    assert all("accuracy" in m for m in history)
    # auto: the actors hold 1 of the shared instance's 2 CPUs, so the coordinator evaluates; split, the evaluations
    # of rounds 1 and 2 go to the actors ahead of the training of the round begun after them
    for evaluate_on, evaluations_on_actors in (("auto", [0, 0]), ("client_actors", [3, 2])):
        other, other_model, on_actors = run("resources.num_actors=2", f"resources.evaluate_on={evaluate_on}")
        assert on_actors == evaluations_on_actors, evaluate_on
        assert other == history, evaluate_on
        assert all(torch.equal(model[k], other_model[k]) for k in model)


def test_settling_a_round_begun_ahead_waits_for_it_and_drops_it(tmp_path):
    """A stop leaves round 2 begun: settling it (before the actors are asked where they run) waits for its results
    and drops them, a failure of its clients included, which is no part of the run."""
    cfg = tiny(tmp_path, "train.rounds=2", "train.clients_per_round=4")
    data = prepare_data(cfg)
    host = ClientHost(cfg, data, list(range(data.num_clients)))
    server = Server(cfg, data)
    awaited: list[int] = []

    def begin(call: ClientCall):
        def results():
            awaited.append(call.round)
            raise RuntimeError("a client of the round never asked for failed")
        return results

    server.run_round(host.call, begin)
    server.settle_started()
    assert awaited == [1] and server.started is None and server.round == 1
