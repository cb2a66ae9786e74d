"""The client-state store (orchestrator/clients/client_store.py): a bounded resident set, versions on disk, and runs
whose history does not depend on how many states stay in memory."""
from __future__ import annotations

import pytest
import torch

from orchestrator.clients.client_store import ClientStateStore
from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import run_in_process
from tasks.algorithms import ALGORITHMS

STATEFUL = [name for name in ALGORITHMS.names() if ALGORITHMS.get(name).capabilities().keeps_client_state]
# 5 clients, 3 of them a round: over 2 rounds some client is never sampled
TINY = ["data.num_clients=5", "train.clients_per_round=3", "train.rounds=2", "train.local_epochs=1",
        "train.batch_size=16", "algorithm.fedfm_lite.warmup_rounds=0", "algorithm.fedavg_periodic.period=2",
        "algorithm.fedrep.head_epochs=2", "algorithm.creff.match_steps=3", "algorithm.creff.retrain_epochs=2"]


def state(value: float) -> dict:
    return {"model": {"w": torch.full((3,), value)}, "margin": value}


def test_a_bounded_store_keeps_few_in_memory_and_reads_the_rest_back(tmp_path):
    store = ClientStateStore(str(tmp_path), resident=2)
    for cid in range(5):
        store.put(cid, state(cid), 1)
    assert store.resident_clients() == [3, 4]
    assert torch.equal(store.get(0)["model"]["w"], torch.zeros(3)) and store.get(0)["margin"] == 0.0
    assert store.resident_clients() == [4, 0]  # read back, and now the most recently used
    assert store.get(7) is None and 7 not in store  # never trained: no state, no file
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"c{c}.r000001.pt" for c in range(5)]


@pytest.mark.parametrize("uri", [False, True])
def test_a_round_reads_the_newest_version_up_to_the_rounds_done(tmp_path, uri):
    store = ClientStateStore(f"file://{tmp_path}" if uri else str(tmp_path), resident=1)  # a pyarrow.fs URI too
    store.put(0, state(1.0), 1)
    store.put(0, state(3.0), 3)
    store.put(1, state(9.0), 1)  # evicts client 0
    assert store.get(0, upto=0) is None
    assert store.get(0, upto=2)["margin"] == 1.0 and store.get(0, upto=3)["margin"] == 3.0
    assert store.get(0)["margin"] == 3.0


def test_loading_drops_the_versions_written_after_the_round_the_run_is_at(tmp_path):
    first = ClientStateStore(str(tmp_path), resident=None)
    for rounds in (1, 2, 3):
        first.put(0, state(rounds), rounds)
        first.put(1, state(10 + rounds), rounds)
    # a restarted actor of clients {0}, resuming after round 2: client 0's round-3 state never happened now
    again = ClientStateStore(str(tmp_path), resident=1, client_ids=[0], upto=2)
    assert again.get(0)["margin"] == 2.0
    assert files(tmp_path) == ["c0.r000002.pt", "c1.r000002.pt", "c1.r000003.pt"]  # client 1: not its own


def test_old_versions_go_unless_a_checkpoint_names_them(tmp_path):
    store = ClientStateStore(str(tmp_path), resident=1, keep=[2])
    for rounds in range(1, 6):
        store.put(0, state(rounds), rounds)
    # kept: the checkpoint of round 2's, the one round 5 started from (a retried round 5 reads it), the newest
    assert files(tmp_path) == ["c0.r000002.pt", "c0.r000004.pt", "c0.r000005.pt"]
    assert store.changed(since=2, until=5) == {0: {"round": 5, **digest(tmp_path / "c0.r000005.pt")}}
    assert store.changed(since=2, until=2) == {} and list(store.changed(None, 2)) == [0]
    assert store.prune(keep=[2, 5], until=5) == 1  # round 4's: no checkpoint names it, no round reads it
    assert files(tmp_path) == ["c0.r000002.pt", "c0.r000005.pt"]


def test_a_checkpoint_looks_only_at_the_clients_written_since_the_last_one(tmp_path):
    """Pruning and listing the changed states at a checkpoint visit the clients written since the previous
    checkpoint, yet delete and list exactly what a store that looks at every client (a fresh one, loaded from
    the same directory) does."""
    import random

    rng, store, keep = random.Random(0), ClientStateStore(str(tmp_path), resident=2), []
    for rounds in range(1, 13):
        for cid in rng.sample(range(40), 5):
            store.put(cid, state(rounds), rounds)
        if rounds % 3 == 0:
            since, keep = (keep[-1] if keep else None), keep + [rounds]
            store.prune(keep, rounds)
            assert store.unpruned == set()  # the next checkpoint starts from the clients written after this one
            full = ClientStateStore(str(tmp_path), resident=2, keep=keep)
            assert full.prune(keep, rounds) == 0  # nothing left that looking at every client would delete
            assert store.changed(since, rounds) == full.changed(since, rounds)
            assert len(store.changed(since, rounds)) <= 15  # 3 rounds × 5 clients, of 40


def files(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def digest(path) -> dict:
    from orchestrator.io.storage import digest

    return digest(path.read_bytes())


def test_every_method_with_client_state_is_stateful():
    assert {"local", "moon", "fednh", "fedsa", "fedproto", "feddebias", "local_pm", "fedavg_pm", "fedper", "fedrep",
            "ditto", "fedrod", "creff"} <= set(STATEFUL)


@pytest.mark.parametrize("name, engine", [(name, "sequential") for name in STATEFUL] + [("local", "vectorized")])
def test_one_resident_state_gives_the_history_of_all_in_memory(tmp_path, name, engine):
    common = TINY + [f"data.partitions_dir={tmp_path / 'p'}", f"algorithm.name={name}", f"train.engine={engine}"]
    cfg = load_config("configs/default.yaml", common)
    data = prepare_data(cfg)
    unbounded = run_in_process(cfg, data)
    tiny = load_config("configs/default.yaml", common + ["resources.resident_clients=1"])
    states = tmp_path / "states"
    assert run_in_process(tiny, data, states_dir=str(states)) == unbounded
    on_disk = {int(p.name.split(".")[0][1:]) for p in states.iterdir()}
    trained = {c for r in range(2) for c in sample(cfg, r)}
    assert on_disk == trained and len(trained) < 5  # a client that never trained has no state on disk


def test_a_method_without_client_state_writes_none(tmp_path):
    cfg = load_config("configs/default.yaml", TINY + [f"data.partitions_dir={tmp_path / 'p'}"])  # FedAvg
    data = prepare_data(cfg)
    states = tmp_path / "states"
    assert run_in_process(cfg, data, states_dir=str(states)) == run_in_process(cfg, data)
    assert not states.exists() or not any(states.iterdir())


def sample(cfg, round_idx: int) -> list[int]:
    from orchestrator.server.sampling import sample_clients

    return sample_clients(cfg.seed, round_idx, cfg.data.num_clients, cfg.clients_per_round)
