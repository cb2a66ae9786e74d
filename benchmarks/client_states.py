"""Client states at scale: what a bounded resident set and checkpoints of the changed states save, and cost.

Local (every client trains its own digits MLP, ~70 kB of state), 2,000 clients with 20 per round, 10 rounds, a
checkpoint every 2 rounds, personalized evaluation of a 100-client sample after the last round; one process (a
ClientHost and the Server, no Ray) so that only the store differs between the two rows:

- baseline: every state in memory, nothing written; a checkpoint copies every state (the earlier format);
- store: at most 16 states in memory, each written to a temporary run directory when its round ends; a
  checkpoint names the files written since the previous one.

Figures, store against baseline in the same run: the state bytes held in memory at the end, a checkpoint's
client-state bytes (the last one's), and seconds per round (what writing and reading the states costs). The two
histories are checked equal.

    python -m benchmarks.client_states        (or: mooring bench states)
"""
from __future__ import annotations

import tempfile
import time

from benchmarks.common import DEFAULT_CONFIG, markdown_table

CLIENTS, PER_ROUND, ROUNDS, EVERY, RESIDENT = 2000, 20, 10, 2, 16


def workload() -> list[str]:
    return ["algorithm.name=local", "data.dataset=synthetic", f"data.synthetic.num_samples={CLIENTS * 25}",
            "data.partition.kind=iid", "data.client_test_fraction=0.2", "data.test_fraction=0.2",
            f"data.num_clients={CLIENTS}", f"train.clients_per_round={PER_ROUND}", f"train.rounds={ROUNDS}",
            "train.local_epochs=1", "train.batch_size=20", f"eval.every={ROUNDS}", "eval.personalized_clients=100",
            f"resources.resident_clients={RESIDENT}"]


def run(cfg, data, states_dir: str | None) -> dict:
    """One run; a checkpoint's client-state bytes measured every EVERY rounds as that row checkpoints them."""
    from orchestrator.clients.client_host import ClientHost
    from orchestrator.clients.client_store import ClientStateStore
    from orchestrator.io.storage import torch_bytes
    from orchestrator.server.federation import Server, in_process_calls
    from tasks.algorithms.base import nbytes

    store = ClientStateStore(states_dir, cfg.resources.resident_clients) if states_dir else ClientStateStore()
    host, server = ClientHost(cfg, data, list(range(CLIENTS)), store=store), Server(cfg, data)
    seconds, checkpoint_bytes, previous = [], 0, None
    for _ in range(ROUNDS):
        start = time.perf_counter()
        server.run_round(in_process_calls(host))
        seconds.append(time.perf_counter() - start)
        if server.round % EVERY == 0:
            if states_dir:
                store.prune([r for r in range(EVERY, server.round + 1, EVERY)], server.round)
                checkpoint_bytes = sum(e["size"] for e in store.changed(previous, server.round).values())
                previous = server.round
            else:
                checkpoint_bytes = len(torch_bytes(host.client_states()))
    held = sum(nbytes(state) for _, (_, state) in store.cache.items())
    return {"history": server.history, "s_per_round": sorted(seconds)[len(seconds) // 2],
            "checkpoint_bytes": checkpoint_bytes, "held_bytes": held}


def measure() -> dict:
    import torch

    from orchestrator.experiment.config import load_config
    from orchestrator.experiment.datasets import prepare_data

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="mooring-states-") as tmp:
        cfg = load_config(DEFAULT_CONFIG, workload() + [f"data.partitions_dir={tmp}/p"])
        data = prepare_data(cfg)
        baseline = run(cfg, data, None)
        store = run(cfg, data, f"{tmp}/client_states")
    assert store["history"] == baseline["history"], "the store changed the history"
    return {"baseline": baseline, "store": store}


def report(measured: dict) -> str:
    base, store = measured["baseline"], measured["store"]
    rows = [[label, f"{base[key] / 1e6:.2f}", f"{store[key] / 1e6:.3f}", f"{store[key] / base[key]:.4f}"]
            for label, key in (("client states held in memory, MB", "held_bytes"),
                               ("a checkpoint's client states, MB", "checkpoint_bytes"))]
    rows.append(["seconds per round (median)", f"{base['s_per_round']:.3f}", f"{store['s_per_round']:.3f}",
                 f"{store['s_per_round'] / base['s_per_round']:.2f}"])
    return markdown_table(["figure", "baseline (all in memory, full copies)",
                           f"store ({RESIDENT} resident, changed files)", "ratio"], rows) + "\n"


if __name__ == "__main__":
    print(report(measure()))
