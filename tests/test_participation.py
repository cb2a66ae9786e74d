"""Clients as they are (orchestrator/server/participation.py): availability, speeds, deadlines with over-selection,
dropouts on a simulated clock; in process (the Ray runs are in tests/test_runtime.py)."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from orchestrator.clients.client_calls import CallKind, ClientCall, ClientResults
from orchestrator.clients.client_host import ClientHost
from orchestrator.clients.client_store import FRESH
from orchestrator.experiment.config import ConfigError, load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.reporting.results import summary_metrics
from orchestrator.server.federation import Server, in_process_calls, run_in_process
from orchestrator.server.participation import (
    Availability,
    ClientSystems,
    plan_round,
    slow_class_shares,
    spread,
    time_to_accuracy,
)
from orchestrator.server.sampling import sample_clients
from pipelines.comparison import Comparison, format_table, summary_table

TINY = ["data.num_clients=8", "train.rounds=3", "train.local_epochs=1", "train.clients_per_round=3"]
# every mechanism at once: Bernoulli availability, spread speeds and bandwidths, a deadline that some clients
# miss, twice the clients needed, dropouts
EVERYTHING = ["participation.availability.kind=bernoulli", "participation.availability.probability=0.8",
              "participation.system.speed.sigma=1.0", "participation.system.bandwidth.sigma=1.0",
              "participation.deadline=2.0", "participation.over_selection=1.0", "participation.dropout=0.2"]
CLOCK_KEYS = {"clients_available", "clients_selected", "clients_dropped", "clients_late", "clients_unused",
              "bytes_down_discarded", "simulated_round_seconds", "simulated_seconds"}


# ------------------------------------------------------------------------------------- a round's plan
def test_the_first_k_to_finish_in_time_are_kept_ties_by_client_id():
    finish = {0: 3.0, 1: 1.0, 2: 2.0, 3: 1.0, 4: 9.0, 5: 0.5}
    plan = plan_round([0, 1, 2, 3, 4, 5], finish, dropped={5}, wanted=3, deadline=4.0, idle_seconds=60.0,
                      available=7)
    # 5 dropped out; by time then id: 1 (1.0), 3 (1.0), 2 (2.0) kept; 0 in time but fourth; 4 after the deadline
    assert plan.kept == [1, 2, 3] and plan.dropped == [5] and plan.unused == [0] and plan.late == [4]
    assert plan.seconds == 2.0  # the third arrival closes the round
    tie = plan_round([4, 2], {4: 1.0, 2: 1.0}, set(), wanted=1, deadline=None, idle_seconds=60.0, available=2)
    assert tie.kept == [2] and tie.unused == [4]


def test_a_round_short_of_clients_waits_for_the_deadline_or_the_last_one_running():
    finish = {0: 1.0, 1: 5.0, 2: 2.5}
    short = plan_round([0, 1, 2], finish, {2}, wanted=2, deadline=3.0, idle_seconds=60.0, available=3)
    assert short.kept == [0] and short.late == [1] and short.seconds == 3.0
    no_deadline = plan_round([0, 1, 2], finish, {1, 2}, wanted=2, deadline=None, idle_seconds=60.0, available=3)
    assert no_deadline.kept == [0] and no_deadline.seconds == 1.0
    nobody = plan_round([], {}, set(), wanted=0, deadline=None, idle_seconds=60.0, available=0)
    assert nobody.kept == [] and nobody.seconds == 60.0


def test_a_clients_time_is_its_steps_at_its_speed_plus_its_bytes_at_its_bandwidth():
    systems = ClientSystems(steps=np.array([10.0, 4.0]), speed=np.array([5.0, 2.0]), bandwidth=np.array([100.0, 50.0]))
    assert systems.seconds([1, 0], 200).tolist() == [4.0 / 2.0 + 200 / 50.0, 10.0 / 5.0 + 200 / 100.0]


def test_spreads_are_per_client_draws_from_the_seed():
    assert spread(7.0, 0.0, 0, 1, 3).tolist() == [7.0, 7.0, 7.0]
    draws = spread(10.0, 1.0, 3, 0x5BD, 4000)
    assert spread(10.0, 1.0, 3, 0x5BD, 4000).tolist() == draws.tolist()
    assert spread(10.0, 1.0, 4, 0x5BD, 4000).tolist() != draws.tolist()
    log = np.log(draws / 10.0)  # standard normal: median 0, std 1 (4000 draws: within 0.06)
    assert abs(np.median(log)) < 0.06 and abs(log.std() - 1.0) < 0.06


# --------------------------------------------------------------------------------------- availability
def availability(workdir, *overrides):
    return Availability(load_config("configs/default.yaml", TINY + workdir + list(overrides)), 8)


def test_bernoulli_availability_is_a_draw_per_round_and_client(workdir):
    avail = availability(workdir, "participation.availability.kind=bernoulli",
                         "participation.availability.probability=0.5")
    rounds = [avail.available(t, now=0.0) for t in range(200)]
    assert rounds[7] == avail.available(7, now=123.0)  # from (seed, round, client), not the clock
    assert len({tuple(r) for r in rounds}) > 50
    assert 0.4 < np.mean([len(r) for r in rounds]) / 8 < 0.6


def test_diurnal_availability_follows_each_clients_phase(workdir):
    avail = availability(workdir, "participation.availability.kind=diurnal", "participation.availability.period=100",
                         "participation.availability.online_fraction=0.25")
    for now in (0.0, 30.0, 77.5):
        expected = [c for c in range(8) if (now / 100 + avail.phase[c]) % 1.0 < 0.25]
        assert avail.available(0, now) == expected
    assert {c for now in range(0, 100, 5) for c in avail.available(0, float(now))} == set(range(8))


def test_a_trace_gives_each_clients_intervals_and_may_repeat(workdir, tmp_path):
    trace = tmp_path / "avail.json"
    trace.write_text(json.dumps({"0": [[0, 10], [20, 30]], "3": [[5, 25]]}))
    overrides = ["participation.availability.kind=trace", f"participation.availability.trace={trace}"]
    once = availability(workdir, *overrides)
    assert [once.available(0, t) for t in (0.0, 7.0, 10.0, 22.0, 30.0, 45.0)] == [[0], [0, 3], [3], [0, 3], [], []]
    repeating = availability(workdir, *overrides, "participation.availability.trace_period=40")
    assert [repeating.available(0, t) for t in (47.0, 65.0, 75.0)] == [[0, 3], [0], []]


@pytest.mark.parametrize("content, message", [
    ("{not json", "not JSON"),
    ('{"x": [[0, 1]]}', "'x' is not a client id"),
    ('{"0": [[5, 1]]}', "client 0: expected a list of \\[start, end\\] pairs"),
    ('{"3": [[0, 1]], "03": [[1, 2]]}', "client 3 is listed twice \\(as '3' and '03'\\); list each client once"),
    ('{"3": [[0, 1]], "3": [[1, 2]]}', "key '3' given twice in one object; give each key once"),
])
def test_a_bad_availability_trace_is_one_line(workdir, tmp_path, content, message):
    trace = tmp_path / "avail.json"
    trace.write_text(content)
    with pytest.raises(ConfigError, match=f"participation.availability.trace = '{trace}': {message}"):
        load_config("configs/default.yaml", TINY + workdir + ["participation.availability.kind=trace",
                                                              f"participation.availability.trace={trace}"])


def test_a_system_trace_replaces_the_draws_and_must_cover_every_client(workdir, tmp_path):
    trace = tmp_path / "system.csv"
    trace.write_text("client,speed,bandwidth\n" + "".join(f"{c},{c + 1},{1000 * (c + 1)}\n" for c in range(7)))
    with pytest.raises(ConfigError, match=r"participation.system.trace = .*: no row for client 7 \(one row per "):
        load_config("configs/default.yaml", TINY + workdir + [f"participation.system.trace={trace}"])
    trace.write_text(trace.read_text() + "7,0,5\n")
    with pytest.raises(ConfigError, match="line 9: speed and bandwidth must be positive and finite"):
        load_config("configs/default.yaml", TINY + workdir + [f"participation.system.trace={trace}"])
    trace.write_text(trace.read_text().replace("7,0,5", "7,8,8000"))
    cfg = load_config("configs/default.yaml", TINY + workdir + [f"participation.system.trace={trace}"])
    server = Server(cfg, prepare_data(cfg))
    assert server.participation.systems.speed.tolist() == [float(c + 1) for c in range(8)]


@pytest.mark.parametrize("rows, message", [
    ("".join(f"{c},1,1\n" for c in range(8)) + "3,2,2\n",
     "line 10: client 3 has a row already \\(line 5\\); one row per client"),
    ("".join(f"{c},1,1\n" for c in range(8)) + "12,1,1\n",
     "client 12 is not in the federation \\(data.num_clients = 8: clients 0 .. 7\\)"),
    ("".join(f"{c},1,1\n" for c in (0, 1, 2, 3, 4, 5, 6, 6)), "line 9: client 6 has a row already"),
])
def test_a_system_trace_naming_a_client_twice_or_outside_the_federation_is_one_line(workdir, tmp_path, rows, message):
    trace = tmp_path / "system.csv"
    trace.write_text("client,speed,bandwidth\n" + rows)
    with pytest.raises(ConfigError, match=f"^configs/default.yaml: participation.system.trace = '{trace}': {message}"):
        load_config("configs/default.yaml", TINY + workdir + [f"participation.system.trace={trace}"])


def test_slow_classes_slow_their_holders_by_their_share(workdir):
    cfg = load_config("configs/default.yaml", TINY + workdir + ["participation.system.slow_classes=[7,8,9]",
                                                                "participation.system.slow_factor=0.1"])
    data = prepare_data(cfg)
    shares = slow_class_shares(data, [7, 8, 9])
    labels = data.dataset.y_train[data.partition.train[0]]
    assert shares[0] == np.isin(labels, [7, 8, 9]).mean()
    assert Server(cfg, data).participation.systems.speed.tolist() == pytest.approx((10.0 * (1 - 0.9 * shares)).tolist())


# ------------------------------------------------------------------------------------------ whole runs
def deterministic_run(cfg):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_in_process(cfg, prepare_data(cfg))
    finally:
        torch.set_num_threads(threads)


def test_at_its_defaults_the_block_changes_nothing(workdir):
    """Defaults: no simulation at all. A clock with nothing limiting the clients (every one available, no deadline,
    no over-selection, no dropout) samples and trains exactly as the default does."""
    cfg = load_config("configs/default.yaml", TINY + workdir + ["train.local_steps=3"])
    assert not cfg.participation.active
    data = prepare_data(cfg)
    assert Server(cfg, data).participation is None and "participation" not in Server(cfg, data).snapshot()
    plain = deterministic_run(cfg)
    clocked = deterministic_run(load_config("configs/default.yaml", TINY + workdir + ["train.local_steps=3",
                                                                                      "participation.system.speed.sigma=0.5"]))
    assert [{k: v for k, v in m.items() if k not in CLOCK_KEYS} for m in clocked] == plain
    assert not CLOCK_KEYS & set(plain[0])
    assert [m["simulated_seconds"] for m in clocked] == sorted(m["simulated_seconds"] for m in clocked)


def test_everything_at_once_is_reproducible_and_trains_only_the_kept_clients(workdir):
    """A stateful method (Local): a client that was dropped, late or surplus is never trained, so its state stays
    at the last round it was kept in."""
    cfg = load_config("configs/default.yaml", TINY + workdir + EVERYTHING + ["algorithm.name=local", "train.rounds=4"])
    data = prepare_data(cfg)
    host, server = ClientHost(cfg, data, list(range(8))), Server(cfg, data)
    trained: list[list[int]] = []
    inner = in_process_calls(host)

    def call(request: ClientCall) -> ClientResults:
        if request.kind is CallKind.UPDATE:
            trained.append(list(request.client_ids))
        return inner(request)

    history = [server.run_round(call) for _ in range(4)]
    assert [len(t) for t in trained] == [m["clients"] for m in history]
    assert sum(m["clients_late"] + m["clients_dropped"] + m["clients_unused"] for m in history) > 0
    assert all(m["clients_selected"] <= m["clients_available"] for m in history)
    last_kept = {c: t + 1 for t, cids in enumerate(trained) for c in cids}
    for cid in range(8):
        assert host.states.version(cid) == last_kept.get(cid, FRESH), cid  # FRESH: made for evaluation only
    assert deterministic_run(cfg) == deterministic_run(cfg)
    assert math.isclose(history[-1]["simulated_seconds"], sum(m["simulated_round_seconds"] for m in history))


def test_a_restored_server_goes_on_from_the_same_clock(workdir):
    cfg = load_config("configs/default.yaml", TINY + workdir + EVERYTHING + [
        "participation.availability.kind=diurnal", "participation.availability.period=10"])
    assert_restored_server_goes_on(cfg, after=2, rounds=1)


def assert_restored_server_goes_on(cfg, after: int, rounds: int) -> None:
    """A server restored from another's snapshot after `after` rounds runs the next `rounds` rounds as it does."""
    data = prepare_data(cfg)
    call = in_process_calls(ClientHost(cfg, data, list(range(8))))
    first = Server(cfg, data)
    for _ in range(after):
        first.run_round(call)
    second = Server(cfg, data)
    second.restore(first.snapshot())
    assert [second.run_round(call) for _ in range(rounds)] == [first.run_round(call) for _ in range(rounds)]


# ----------------------------------------------------------------------------------------- reporting
def clocked_history(accuracies: list[float], seconds: float) -> list[dict]:
    return [{"round": r + 1, "accuracy": a, "bytes_total": 100 * (r + 1), "simulated_seconds": seconds * (r + 1)}
            for r, a in enumerate(accuracies)]


def test_time_to_target_is_the_clock_at_the_first_round_that_reached_it():
    history = clocked_history([0.2, 0.71, 0.6, 0.9], seconds=2.5)
    assert time_to_accuracy(history, 0.7) == 5.0
    assert time_to_accuracy(history, 0.95) is None
    summary = summary_metrics(history, target=0.7)
    assert summary["simulated_seconds"] == 10.0 and summary["time_to_target"] == 5.0
    assert "simulated_seconds" not in summary_metrics([{k: v for k, v in m.items() if k != "simulated_seconds"}
                                                       for m in history])


def test_compares_table_has_the_clock_and_the_time_to_target():
    comp = Comparison()
    for seed, (accs, seconds) in enumerate([([0.5, 0.8], 3.0), ([0.5, 0.6], 4.0)]):
        h = clocked_history(accs, seconds)
        comp.rows.append({"variant": "fedavg", "seed": seed, **summary_metrics(h, 0.7), "wall_seconds": 1.0})
    row = summary_table(comp)[0]
    assert row["simulated_seconds"] == 7.0 and row["time_to_target"] == 6.0 and row["target_reached"] == 1
    assert "6 (1/2)" in format_table([row]).splitlines()[1]


def test_sampling_from_everyone_matches_the_default_draw():
    from orchestrator.server.participation import select_clients

    assert select_clients(5, 3, list(range(20)), 4) == sample_clients(5, 3, 20, 4)
    assert select_clients(5, 3, [2, 4, 9], 2) == [[2, 4, 9][i] for i in sample_clients(5, 3, 3, 2)]


# ------------------------------------------------------------------------- per-class statistics folded
def rows_of_class(name: str, state, c: int) -> dict[str, torch.Tensor]:
    """What each method keeps for class `c` in its global state (docs/methods/<name>.md, partial participation)."""
    if name == "fednh":
        return {"prototype": state["model"]["classifier.weight"][c]}
    if name in ("fedfa", "fedfm"):
        return {"anchor": state["anchors"][c]}
    rows = {"prototype": state["protos"][c], "has_prototype": state["proto_mask"][c]}
    return rows | ({"anchor": state["anchors"][c]} if name == "fedsa" else {})


@pytest.mark.parametrize("name", ["fedfa", "fedfm", "fednh", "fedsa", "fedproto"])
def test_a_class_with_no_arrivals(workdir, name):
    """Two rounds: all clients, then only those without class c arrive. FedFA, FedFM, FedNH and FedSA keep what
    they had for c; FedProto (and FedSA's prototypes) drop c's prototype until a holder arrives."""
    cfg = load_config("configs/default.yaml", TINY + workdir + [f"algorithm.name={name}", "train.local_steps=2",
                                                                "algorithm.fedfm.warmup_rounds=0"])
    data = prepare_data(cfg)
    host, server = ClientHost(cfg, data, list(range(8))), Server(cfg, data)
    call = in_process_calls(host)
    holds = [set(np.unique(data.dataset.y_train[idx]).tolist()) for idx in data.partition.train]
    c = next(c for c in range(10) if 0 < sum(c in h for h in holds) < 8)
    without = [cid for cid in range(8) if c not in holds[cid]]

    def fold(cids: list[int], t: int):
        payload = server.algorithm.payload(server.state, t)
        if server.algorithm.capabilities().pre_round_exchange:
            contributions = call(ClientCall(CallKind.PRE_ROUND, payload, cids, t)).results
            server.state = server.algorithm.server_pre_round(server.state, [contributions[k] for k in cids], t)
            payload = server.algorithm.payload(server.state, t)
        updates = call(ClientCall(CallKind.UPDATE, payload, cids, t)).results
        server.state = server.algorithm.aggregate(server.state, [updates[k] for k in cids], t)

    held = next(k for k in range(10) if any(k in holds[cid] for cid in without))  # a class that does arrive
    fold(list(range(8)), 0)
    before = {k: v.clone() for k, v in rows_of_class(name, server.state, c).items()}
    moving = {k: v.clone() for k, v in rows_of_class(name, server.state, held).items()}
    fold(without, 1)
    after = rows_of_class(name, server.state, c)
    key = "anchor" if name in ("fedfa", "fedfm", "fedsa") else "prototype"
    assert not torch.equal(rows_of_class(name, server.state, held)[key], moving[key])  # the fold did move a row
    if name in ("fedsa", "fedproto"):
        assert bool(before["has_prototype"]) and not bool(after["has_prototype"])
        assert torch.count_nonzero(after["prototype"]) == 0
    if name == "fedfa":  # the weighted mean of identical rows, in float64 and cast back
        torch.testing.assert_close(after["anchor"], before["anchor"], rtol=1e-6, atol=1e-7)
    elif name != "fedproto":
        assert torch.equal(after[key], before[key])


# ------------------------------------------------------------------------------ buffered (FedBuff)
BUFFERED = ["participation.mode=buffered", "participation.buffer.size=3", "participation.buffer.concurrency=4",
            "participation.system.speed.sigma=1.0", "participation.dropout=0.1", "train.local_steps=2"]


def test_two_staleness_weighted_folds_by_hand(workdir):
    """θ0 = (1, 2). Version 0 folds A (n=1, θ=(3, 2)) and B (n=3, θ=(1, 6)), both sent θ0: θ1 = θ0 + (1·(2, 0) +
    3·(0, 4))/4 = (1.5, 5). Version 1 folds C (n=2, θ=(5, 2), sent θ0: staleness 1, weight 2^-½) and D (n=2,
    θ=(1.5, 7), sent θ1: weight 1): θ2 = θ1 + (2^-½·2·(4, 0) + 2·(0, 2))/4 = (1.5 + √2, 6)."""
    from orchestrator.server.buffered import Arrival, BufferedAggregation
    from tasks.algorithms.base import ClientUpdate

    cfg = load_config("configs/default.yaml", TINY + workdir + ["participation.mode=buffered",
                                                                "participation.buffer.exponent=0.5"])
    buffered = BufferedAggregation(cfg, prepare_data(cfg))
    steps = torch.tensor(7)

    def update(cid, n, w):
        return ClientUpdate(cid, n, tensors={"w": torch.tensor(w), "steps": steps})

    theta0 = {"w": torch.tensor([1.0, 2.0]), "steps": steps}
    buffered.models = {0: theta0}
    first = buffered.new_version({"model": theta0}, [Arrival(1.0, 0, 0), Arrival(2.0, 1, 0)],
                                 {0: update(0, 1, [3.0, 2.0]), 1: update(1, 3, [1.0, 6.0])}, version=0)
    assert first["model"]["w"].tolist() == [1.5, 5.0] and first["model"]["steps"] == 7
    buffered.models[1] = first["model"]
    second = buffered.new_version(first, [Arrival(3.0, 2, 0), Arrival(3.5, 3, 1)],
                                  {2: update(2, 2, [5.0, 2.0]), 3: update(3, 2, [1.5, 7.0])}, version=1)
    assert second["model"]["w"].tolist() == pytest.approx([1.5 + math.sqrt(2.0), 6.0], abs=1e-6)
    constant = load_config("configs/default.yaml", TINY + workdir + ["participation.mode=buffered",
                                                                     "participation.buffer.staleness=constant"])
    flat = BufferedAggregation(constant, prepare_data(constant))
    flat.models = buffered.models
    again = flat.new_version(first, [Arrival(3.0, 2, 0), Arrival(3.5, 3, 1)],
                             {2: update(2, 2, [5.0, 2.0]), 3: update(3, 2, [1.5, 7.0])}, version=1)
    assert again["model"]["w"].tolist() == pytest.approx([3.5, 6.0])


def test_a_fold_of_fresh_updates_is_fedavgs_weighted_mean():
    from orchestrator.server.buffered import fold_buffer
    from tasks.algorithms.base import ClientUpdate, weighted_average

    gen = torch.Generator().manual_seed(0)
    start = {"w": torch.randn(3, 2, generator=gen)}
    models = [{"w": torch.randn(3, 2, generator=gen)} for _ in range(3)]
    updates = [(ClientUpdate(i, n, tensors=m), start, 1.0) for i, (n, m) in enumerate(zip([5, 1, 9], models))]
    torch.testing.assert_close(fold_buffer(start, updates, 1.0)["w"], weighted_average(models, [5, 1, 9])["w"])


def test_events_come_in_time_order_ties_by_client_id():
    from orchestrator.server.buffered import Arrival, EventQueue, Outcome

    queue = EventQueue([Arrival(2.0, 5, 0), Arrival(1.0, 7, 1), Arrival(2.0, 3, 1)])
    queue.push(Arrival(1.0, 2, 0, Outcome.DROPS))
    queue.push(Arrival(2.0, 4, 0))
    assert [(e.time, e.client) for e in (queue.pop() for _ in range(5))] == [(1.0, 2), (1.0, 7), (2.0, 3),
                                                                             (2.0, 4), (2.0, 5)]


def test_clients_that_finish_together_arrive_in_client_id_order(workdir):
    """Equal speeds and steps: every client sent at once finishes at the same simulated time."""
    from orchestrator.server.buffered import BufferedAggregation

    cfg = load_config("configs/default.yaml", TINY + workdir + ["participation.mode=buffered", "train.local_steps=2",
                                                                "participation.buffer.size=3",
                                                                "participation.buffer.concurrency=5"])
    buffered = BufferedAggregation(cfg, prepare_data(cfg))
    arrived, _ = buffered.collect(0, Server(cfg, prepare_data(cfg)).state, payload_bytes=1000)
    assert len({e.time for e in arrived}) == 1 and [e.client for e in arrived] == sorted(e.client for e in arrived)
    # 5 sent; each of the 3 arrivals freed a slot, refilled from the 3 clients not yet sent this version
    assert len(arrived) == 3 and len(buffered.queue) == 5 and buffered.sent_this_version == set(range(8))
    assert not {e.client for e in arrived} & buffered.queue.clients()


def test_a_buffered_run_is_reproducible_resumable_and_stale(workdir):
    cfg = load_config("configs/default.yaml", TINY + workdir + BUFFERED + ["train.rounds=4"])
    history = deterministic_run(cfg)
    assert deterministic_run(cfg) == history
    assert max(m["staleness_max"] for m in history) > 0 and all(m["clients"] <= 3 for m in history)
    assert_restored_server_goes_on(cfg, after=2, rounds=2)


def test_buffered_aggregation_refuses_methods_it_cannot_run(workdir):
    with pytest.raises(ConfigError, match=r"participation.mode = 'buffered': fedfa does not aggregate by averaging "
                                          r"models as FedAvg does; buffered aggregation runs"):
        load_config("configs/default.yaml", TINY + workdir + ["participation.mode=buffered", "algorithm.name=fedfa"])
    with pytest.raises(ConfigError, match="local does not aggregate"):
        load_config("configs/default.yaml", TINY + workdir + ["participation.mode=buffered", "algorithm.name=local"])


# -------------------------------------------------------------------- traces refused in one line (issue 36)
@pytest.mark.parametrize("content, message", [
    ('{"0": [[0, 1' + "0" * 400 + ']]}', "client 0: expected a list of \\[start, end\\] pairs of finite numbers"),
    ("[" * 100_000 + "]" * 100_000, "nested more than"),
    ("{}", "lists no client"),
    ('{"8": [[0, 1]]}', "client 8 is not in the federation \\(data.num_clients = 8: clients 0 .. 7\\)"),
    ('{"0": [[0, 1]], "1' + "0" * 30 + '": [[0, 1]]}', "client 1" + "0" * 30 + " is not in the federation"),
])
def test_an_availability_trace_out_of_range_or_too_deep_or_empty_is_one_line(workdir, tmp_path, content, message):
    trace = tmp_path / "avail.json"
    trace.write_text(content)
    with pytest.raises(ConfigError) as e:
        load_config("configs/default.yaml", TINY + workdir + ["participation.availability.kind=trace",
                                                              f"participation.availability.trace={trace}"])
    [line] = str(e.value).splitlines()
    assert re.search(f"participation.availability.trace = '{trace}': {message}", line), line


def test_a_system_trace_with_a_field_over_the_csv_limit_is_one_line(workdir, tmp_path):
    trace = tmp_path / "system.csv"
    trace.write_text("client,speed,bandwidth\n0,1," + "1" * 200_000 + "\n")
    with pytest.raises(ConfigError) as e:
        load_config("configs/default.yaml", TINY + workdir + [f"participation.system.trace={trace}"])
    [line] = str(e.value).splitlines()
    assert f"participation.system.trace = '{trace}': not CSV (field larger than field limit" in line, line
