"""Client groups (train.group_steps, orchestrator/clients/client_groups.py): fixed by the config and the round, so a run's
history is bitwise the same on any number of client actors and in the coordinator, on both engines, with partial
sums on (the default)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from orchestrator.clients.client_calls import CallKind, ClientCall, ClientResults
from orchestrator.clients.client_groups import ClientGroups, client_blocks
from orchestrator.clients.client_host import ClientHost
from orchestrator.clients.client_work import client_costs
from orchestrator.driver.run import run_experiment
from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.ray_runtime.client_pool import plan_round
from orchestrator.server.federation import Server
from tests.test_engines import VECTORIZED, tiny

# 6 clients, 5 a round, one epoch of batch 8: about 107 expected steps a round, three groups of at most 40
GROUPED = ["train.local_epochs=1", "train.clients_per_round=5", "train.group_steps=40", "train.rounds=2"]


def test_blocks_are_consecutive_ids_of_about_group_steps_each_by_hand():
    # every client sampled: 8 steps a round in all, 2 blocks of 4; a client goes where the midpoint of its steps is
    assert client_blocks([1, 1, 1, 1, 2, 2], clients_per_round=6, group_steps=4) == [0, 0, 0, 0, 1, 1]
    # half of them sampled: 4 expected steps, one block
    assert client_blocks([1, 1, 1, 1, 2, 2], clients_per_round=3, group_steps=4) == [0] * 6
    # 5 expected steps: two blocks of at most 4, the second from the client whose steps' midpoint passes 2.5
    assert client_blocks([1, 1, 1, 1, 1], clients_per_round=5, group_steps=4) == [0, 0, 1, 1, 1]
    # never more blocks than clients, never fewer than one
    assert client_blocks([10, 10], clients_per_round=2, group_steps=1) == [0, 1]
    assert client_blocks([0, 0], clients_per_round=2, group_steps=5) == [0, 0]


def test_auto_groups_are_the_coordinators_round_size_of_the_engine(tmp_path):
    """group_steps: auto is SMALL_ROUND_STEPS of the engine: a round small enough for the coordinator is one group."""
    from orchestrator.clients.client_groups import SMALL_ROUND_STEPS

    cfg = tiny(tmp_path, "train.local_epochs=1")
    data = prepare_data(cfg)
    expected = sum(client_costs(data, cfg.train))  # every client a round
    assert SMALL_ROUND_STEPS["sequential"] < expected <= SMALL_ROUND_STEPS["vectorized"]
    algorithm = ClientHost(cfg, data, []).algorithm
    assert ClientGroups.of_run(cfg, data, "vectorized", algorithm).count == 1
    assert (ClientGroups.of_run(cfg, data, "sequential", algorithm).count
            == -(-expected // SMALL_ROUND_STEPS["sequential"]))


def test_auto_groups_of_a_large_model_are_a_few_steps_each(tmp_path):
    """A model of more than SMALL_MODEL_MACS a sample (acar_cnn on 28×28 digits: a step costs its arithmetic):
    groups of LARGE_MODEL_ROUND_STEPS expected steps on either engine, and clients_on=auto sends a round of more
    steps than that to client actors; the digits MLP's round of the same steps stays in the coordinator."""
    from orchestrator.clients.client_groups import LARGE_MODEL_ROUND_STEPS
    from orchestrator.ray_runtime.placement import clients_in_coordinator
    from tasks.algorithms.engines import large_model

    cfg = tiny(tmp_path, "train.local_epochs=1", "data.dataset=digits_28", "model.name=acar_cnn",
               "model.hidden=384")
    data = prepare_data(cfg)
    algorithm = ClientHost(cfg, data, []).algorithm
    expected = sum(client_costs(data, cfg.train))
    assert "AcarCNN costs 2,321,024" in large_model(algorithm) and expected > LARGE_MODEL_ROUND_STEPS
    for engine in ("sequential", "vectorized"):
        groups = ClientGroups.of_run(cfg, data, engine, algorithm).count
        assert groups == min(data.num_clients, -(-expected // LARGE_MODEL_ROUND_STEPS))  # at most one a client
    assert not clients_in_coordinator(cfg, data)
    mlp = tiny(tmp_path, "train.local_epochs=1")
    mlp_data = prepare_data(mlp)
    assert large_model(ClientHost(mlp, mlp_data, []).algorithm) == "" and clients_in_coordinator(mlp, mlp_data)


def test_a_rounds_groups_and_the_hosts_of_blocks():
    groups = ClientGroups((0, 0, 1, 1, 2))
    assert groups.split([4, 0, 3, 1]) == [[0, 1], [3], [4]]
    assert groups.hosts(2) == [[0, 1, 4], [2, 3]]
    assert groups.hosts(4) == [[0, 1], [2, 3], [4], []]


def as_on_actors(cfg, data, num_actors: int):
    """What ActorPool does, in this process: the clients hosted as on `num_actors` actors (block by block), a
    round's groups placed whole (orchestrator/ray_runtime/client_pool.py); and the plans."""
    probe = ClientHost(cfg, data, [])
    groups = ClientGroups.of_run(cfg, data, probe.engine, probe.algorithm)
    sticky = probe.algorithm.capabilities().keeps_client_state
    hosted = groups.hosts(num_actors)
    hosts = [ClientHost(cfg, data, cids) for cids in hosted]
    owner = {c: a for a, cids in enumerate(hosted) for c in cids}
    costs = None if sticky else client_costs(data, cfg.train)
    plans = []

    def call(c: ClientCall) -> ClientResults:
        plan = plan_round(groups.split(c.client_ids), owner, num_actors, costs)
        plans.append(plan)
        gathered = ClientResults()
        for actor, cids in plan.items():
            gathered.add(hosts[actor].call(c.to(cids)))
        return gathered

    return call, plans


def history_as_on_actors(cfg, data, num_actors: int):
    server = Server(cfg, data)
    call, plans = as_on_actors(cfg, data, num_actors)
    if not server.set_up:
        contributions = call(ClientCall(CallKind.SETUP, None, list(range(data.num_clients)), 0)).results
        server.setup([contributions[c] for c in sorted(contributions)])
    history = [server.run_round(call) for _ in range(cfg.train.rounds)]
    return history, server.state, plans


def assert_same_state(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for key in a:
            assert_same_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    else:
        assert a == b, where


@pytest.mark.parametrize("name", VECTORIZED)
def test_every_vectorized_method_has_one_history_on_1_2_and_3_actors(tmp_path, name):
    """The default engine (auto) and partial sums: each method `auto` vectorises, hosted and placed as on 1, 2
    and 3 actors (one actor is the coordinator's host: every client in one), bitwise the same."""
    cfg = tiny(tmp_path, f"algorithm.name={name}", *GROUPED)
    data = prepare_data(cfg)
    probe = ClientHost(cfg, data, [])
    assert probe.engine == "vectorized" and ClientGroups.of_run(cfg, data, "vectorized", probe.algorithm).count == 3
    one, one_state, _ = history_as_on_actors(cfg, data, 1)
    for actors in (2, 3):
        history, state, plans = history_as_on_actors(cfg, data, actors)
        assert any(len(plan) > 1 for plan in plans), "no round was spread over several actors"
        assert history == one, f"{name} on {actors} actors"
        assert_same_state(state, one_state, f"{name} on {actors} actors")


@pytest.mark.parametrize("name, summed", [("fedavg", True), ("ditto", True), ("fednh", False)])
def test_the_sequential_engine_has_one_history_on_1_2_and_3_actors(tmp_path, name, summed):
    cfg = tiny(tmp_path, f"algorithm.name={name}", "train.engine=sequential", *GROUPED)
    data = prepare_data(cfg)
    assert Server(cfg, data).summed is summed
    one, one_state, _ = history_as_on_actors(cfg, data, 1)
    for actors in (2, 3):
        history, state, _ = history_as_on_actors(cfg, data, actors)
        assert history == one, f"{name} on {actors} actors"
        assert_same_state(state, one_state, f"{name} on {actors} actors")


@pytest.mark.ray
def test_a_default_run_on_ray_has_one_history_on_1_2_and_3_actors_and_in_the_coordinator(ray_session, workdir):
    """Real client actors (their results cross processes) and the coordinator's own host, at the defaults (engine
    auto, partial sums on): the final global model and the history, bitwise."""
    def run(*where: str):
        cfg = load_config("configs/default.yaml", workdir + [
            "data.num_clients=6", "train.clients_per_round=5", "train.rounds=2", "train.group_steps=4",
            "checkpoint.every=0", "resources.cpus_per_actor=0.5", *where])
        result = run_experiment(cfg, progress=False)
        state = torch.load(Path(result.run_dir) / "final_state.pt", weights_only=True)
        return state["model"], result.history

    model, history = run("resources.clients_on=coordinator")
    for actors in (1, 2, 3):
        other, other_history = run("resources.clients_on=actors", f"resources.num_actors={actors}")
        assert all(torch.equal(model[k], other[k]) for k in model), f"{actors} actors"
        assert other_history == history, f"{actors} actors"
