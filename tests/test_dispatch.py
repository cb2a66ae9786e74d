"""How a round's groups of clients are spread over actors, each group whole: sticky for methods with client
state, balanced otherwise."""
from __future__ import annotations

import pytest
import torch

from orchestrator.clients.client_calls import CallKind, ClientCall
from orchestrator.clients.client_host import ClientHost
from orchestrator.clients.client_work import (
    STEP_FIXED_FORWARDS,
    STEP_SAMPLE_FORWARDS,
    client_costs,
    client_work,
)
from orchestrator.experiment.config import ConfigError, load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.ray_runtime.client_pool import plan_round
from orchestrator.server.federation import Server, in_process_calls
from tasks.algorithms import ALGORITHMS

TINY = ["data.num_clients=4", "train.rounds=2", "train.local_epochs=1"]


def test_sticky_plan_keeps_every_group_on_its_host():
    owner = {0: 0, 1: 1, 2: 0, 3: 1, 4: 0}
    assert plan_round([[0, 2], [3], [4]], owner, num_actors=2, costs=None) == {0: [0, 2, 4], 1: [3]}


def test_balanced_plan_puts_the_largest_group_on_the_least_loaded_actor():
    costs = [5.0, 40.0, 12.0, 40.0, 3.0, 25.0]
    # clients alone: 1 (40) → a0; 3 (40) → a1; 5 (25) → a0 (tie at 40: the lower index); then a1 is lighter
    # (40 < 65) for 2 (12), 0 (5) and 4 (3): loads end 65 and 60
    alone = [[c] for c in range(6)]
    assert plan_round(alone, {}, num_actors=2, costs=costs) == {0: [1, 5], 1: [3, 2, 0, 4]}
    # groups whole: [2, 3] (52) → a0; [0, 1] (45) → a1; [4, 5] (28) → a1 (45 < 52)
    assert plan_round([[0, 1], [2, 3], [4, 5]], {}, num_actors=2, costs=costs) == {0: [2, 3], 1: [0, 1, 4, 5]}


def test_balanced_plan_sends_a_group_home_when_loads_tie():
    owner = {0: 1, 1: 0, 2: 1, 3: 0}
    # equal costs: 0 → a1 (tie at 0, home), 1 → a0 (lighter), 2 → a1 (tie, home), 3 → a0 (lighter)
    assert plan_round([[0], [1], [2], [3]], owner, num_actors=2, costs=[1.0] * 4) == {1: [0, 2], 0: [1, 3]}


def test_balanced_plan_with_fewer_groups_than_actors_leaves_actors_out():
    assert plan_round([[6, 7]], {}, num_actors=3, costs=[1.0] * 8) == {0: [6, 7]}


def test_client_costs_count_optimizer_steps(workdir):
    cfg = load_config("configs/default.yaml", TINY + workdir + ["train.batch_size=4", "train.local_epochs=3"])
    data = prepare_data(cfg)
    assert client_costs(data, cfg.train) == [3.0 * -(-n // 4) for n in data.train_sizes()]
    steps = load_config("configs/default.yaml", TINY + workdir + ["train.local_steps=7"])
    assert client_costs(data, steps.train) == [7.0] * 4


def test_a_clients_work_is_a_fixed_part_and_a_part_per_sample_of_each_step(workdir):
    cfg = load_config("configs/default.yaml", TINY + workdir + ["train.batch_size=16", "train.local_epochs=2"])
    data = prepare_data(cfg)
    for n, work in zip(data.train_sizes(), client_work(data, cfg.train)):
        # e.g. 35 samples: steps of 16, 16 and 3, twice: 2·(3·5 + 2·35) = 170 forward passes of one sample
        steps = -(-n // 16)
        assert work == 2 * (STEP_FIXED_FORWARDS * steps + STEP_SAMPLE_FORWARDS * n)


STATELESS = sorted(n for n in ALGORITHMS.names() if not ALGORITHMS.get(n).capabilities().keeps_client_state)


def test_the_baselines_and_the_anchor_methods_are_balanced():
    assert {"fedavg", "fedprox", "fedfa", "fedfm"} <= set(STATELESS)
    assert not {"local", "moon", "fednh", "fedsa", "fedproto", "feddebias", "fedfm_lite"} & set(STATELESS)


@pytest.mark.parametrize("name", STATELESS)
def test_methods_that_declare_no_client_state_keep_none(workdir, name):
    """What lets the coordinator balance a method's clients over actors must be true of the method."""
    cfg = load_config("configs/default.yaml", TINY + workdir + [f"algorithm.name={name}"])
    data = prepare_data(cfg)
    host, server = ClientHost(cfg, data, list(range(4))), Server(cfg, data)
    if not server.set_up:
        server.setup([host.setup_contribution(c) for c in range(4)])
    for _ in range(2):
        server.run_round(in_process_calls(host))
    kept = {c: s for c, s in host.states.items() if s}
    assert kept == {}, f"{name} says keeps_client_state = False but kept state for clients {sorted(kept)}"


def test_a_guest_client_trains_exactly_as_on_its_own_host(workdir):
    cfg = load_config("configs/default.yaml", TINY + workdir)
    data = prepare_data(cfg)
    payload = Server(cfg, data).algorithm.payload(Server(cfg, data).state, 0)
    at_home = ClientHost(cfg, data, [1]).call(ClientCall(CallKind.UPDATE, payload, [1], 0)).results[1]
    as_guest = ClientHost(cfg, data, [0]).call(ClientCall(CallKind.UPDATE, payload, [1], 0)).results[1]
    assert as_guest.num_samples == at_home.num_samples
    for key, tensor in at_home.tensors.items():
        assert torch.equal(tensor, as_guest.tensors[key]), key


def test_a_client_with_state_is_never_trained_as_a_guest(workdir):
    cfg = load_config("configs/default.yaml", TINY + workdir + ["algorithm.name=local"])
    data = prepare_data(cfg)
    server = Server(cfg, data)
    with pytest.raises(KeyError, match="keeps client state"):
        ClientHost(cfg, data, [0]).call(ClientCall(CallKind.UPDATE, server.algorithm.payload(server.state, 0), [1], 0))


@pytest.mark.ray
def test_a_client_that_raises_stops_its_call_and_its_actor_goes_on(ray_session, workdir):
    """A host fails no client alone (issue #36: that was a lost actor's treatment, and hid bugs): the call raises,
    and the actor answers the next one."""
    import ray

    from orchestrator.ray_runtime.client_actor import ClientActor

    cfg = load_config("configs/default.yaml", TINY + workdir + ["algorithm.name=local"])
    data = prepare_data(cfg)
    server = Server(cfg, data)
    actor = ClientActor.remote(cfg, [0, 2], str(cfg.checkpoint.dir) + "/x", 1)
    assert ray.get(actor.ping.remote()) is False  # alive, not loaded: a call now answers None
    assert ray.get(actor.call.remote(ClientCall(CallKind.UPDATE, None, [0], 0), None)) is None
    ray.get(actor.load.remote([ray.put(data)], 0, [0, 2]))
    assert ray.get(actor.ping.remote()) is True
    payload = server.algorithm.payload(server.state, 0)
    call = ClientCall(CallKind.UPDATE, None, [0, 1, 2], 0)  # client 1 lives elsewhere
    with pytest.raises(ray.exceptions.RayTaskError, match="client 1 is not hosted here and local keeps client state"):
        ray.get(actor.call.remote(call, payload))
    answered, _seconds = ray.get(actor.call.remote(call.to([0, 2]), payload))
    assert sorted(answered.results) == [0, 2] and answered.results[2].client_id == 2 and not answered.errors
    ray.kill(actor)


def test_where_clients_train_follows_the_size_of_a_round(tmp_path):
    """resources.clients_on = auto: in the coordinator up to SMALL_ROUND_STEPS optimizer steps a round (per engine:
    a vectorized step trains many clients), on client actors above it or when a GPU is asked for; an explicit
    choice stands."""
    from orchestrator.clients.client_groups import SMALL_ROUND_STEPS
    from orchestrator.ray_runtime.placement import clients_in_coordinator

    def placed(*overrides: str) -> tuple[bool, float]:
        cfg = load_config("configs/default.yaml", TINY + [f"data.partitions_dir={tmp_path}", *overrides])
        data = prepare_data(cfg)
        costs = client_costs(data, cfg.train)
        return clients_in_coordinator(cfg, data), cfg.clients_per_round * sum(costs) / len(costs)

    small, small_steps = placed("train.engine=sequential")
    large, large_steps = placed("train.engine=sequential", "train.local_epochs=3")
    assert small_steps <= SMALL_ROUND_STEPS["sequential"] < large_steps and (small, large) == (True, False)
    assert large_steps <= SMALL_ROUND_STEPS["vectorized"] and placed("train.engine=vectorized", "train.local_epochs=3")[0]
    assert not placed("train.engine=sequential", "resources.gpus_per_actor=0.5")[0]
    assert not placed("resources.clients_on=actors")[0] and placed("train.local_epochs=3", "resources.clients_on=coordinator")[0]
    with pytest.raises(ConfigError, match=r"resources.clients_on = .coordinator.: the coordinator has no GPU"):
        load_config("configs/default.yaml", TINY + ["resources.clients_on=coordinator", "resources.gpus_per_actor=0.5"])
