"""Tiny clients: many clients with one or two optimizer steps each, where a round's fixed costs show.

Digits, IID over the clients (all of a client's samples for training), the digits MLP 64-128-64-10, FedAvg,
1 local epoch of batch 16, plain SGD (lr 0.05, no momentum, no weight decay), 20 rounds, the global model
evaluated after the last. Two sizes: 1,000 clients with 100 per round (one or two samples each) and 100
clients with 10 per round. Every figure is the rounds' seconds divided by those of the bare loop
(benchmarks/bare_loop.py, a fresh process) measured in the same run; each row is the fastest of `repeats`
interleaved runs. Mooring runs as a user runs it: MLflow tracking (a temporary SQLite store) and checkpoints on.

    python -m benchmarks.tiny_clients        (or: mooring bench tiny [--size 1000/100] [--engine E] ...)
"""
from __future__ import annotations

import time

from benchmarks.common import (
    DEFAULT_CONFIG,
    bare_loop_process,
    local_ray,
    markdown_table,
    reproduce,
    store_overrides,
    temp_workdir,
)

SIZES = ("1000/100", "100/10")
BARE = "bare loop (fresh process, 1 thread)"
IN_PROCESS = "Mooring's run_in_process (1 thread, no Ray)"
TARGETS = {("1000/100", 2): 0.2, ("100/10", 2): 1.0}  # × the bare loop, with two actors (issue 13)


def workload(size: str, rounds: int = 20) -> list[str]:
    clients, per_round = (int(n) for n in size.split("/"))
    return ["algorithm.name=fedavg", "data.dataset=digits", "data.partition.kind=iid", "data.client_test_fraction=0",
            f"data.num_clients={clients}", f"train.clients_per_round={per_round}", f"train.rounds={rounds}",
            "train.local_epochs=1", "train.batch_size=16", "train.optimizer.name=sgd", "train.optimizer.lr=0.05",
            "train.optimizer.momentum=0", "train.optimizer.weight_decay=0", f"eval.every={rounds}"]


def mooring_rows(actors: tuple[int, ...], engines: tuple[str | None, ...]) -> list[tuple[str, int, list[str]]]:
    """(row label, actors, overrides) for each number of actors and each engine (None: as the config says)."""
    rows = []
    for engine in engines:
        for n in actors:
            label = f"Mooring, {n} actor{'s' if n > 1 else ''}" + (f", engine {engine}" if engine else "")
            rows.append((label, n, [f"resources.num_actors={n}"] + ([f"train.engine={engine}"] if engine else [])))
    return rows


def in_process_seconds(cfg) -> float:
    """Mooring's `run_in_process` (one process, no Ray, no tracking), one intra-op thread, rounds only."""
    import torch
    import torch._dynamo  # noqa: F401 - see benchmarks/bare_loop.py

    from orchestrator.datasets import prepare_data
    from orchestrator.federation import run_in_process

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        data = prepare_data(cfg)
        start = time.perf_counter()
        run_in_process(cfg, data)
        return time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)


def measure(sizes: tuple[str, ...] = SIZES, rounds: int = 20, repeats: int = 3, actors: tuple[int, ...] = (1, 2),
            engines: tuple[str | None, ...] = (None,), mooring_overrides: tuple[str, ...] = ()) -> dict:
    """`mooring_overrides` apply to the Mooring rows only (resources.partial_sums=true, for example)."""
    from orchestrator.config import load_config
    from orchestrator.run import run_experiment

    out: dict = {"rounds": rounds, "repeats": repeats, "sizes": {}, "targets": {},
                 "command": command(sizes, rounds, repeats, actors, engines, mooring_overrides)}
    with temp_workdir() as tmp, local_ray():
        for size in sizes:
            base = workload(size, rounds) + store_overrides(tmp)
            best: dict[str, float] = {}
            for _ in range(repeats):
                seconds = {BARE: bare_loop_process(DEFAULT_CONFIG, base, tmp)[0],
                           IN_PROCESS: in_process_seconds(load_config(DEFAULT_CONFIG, base))}
                for label, n, overrides in mooring_rows(actors, engines):
                    out["targets"][(size, label)] = TARGETS.get((size, n))
                    cfg = load_config(DEFAULT_CONFIG, base + overrides + list(mooring_overrides))
                    result = run_experiment(cfg, progress=False)
                    seconds[label] = sum(result.round_seconds)
                for label, s in seconds.items():
                    best[label] = min(best.get(label, s), s)
            out["sizes"][size] = best
    return out


def command(sizes, rounds, repeats, actors, engines, mooring_overrides=()) -> str:
    parts = ["mooring bench tiny"] + [f"--size {s}" for s in sizes] + [f"--rounds {rounds}", f"--repeats {repeats}"]
    parts += [f"--actors {','.join(map(str, actors))}"] + [f"--engine {e}" for e in engines if e]
    return " ".join(parts + [f"--set {o}" for o in mooring_overrides])


def report(m: dict) -> str:
    blocks = []
    for size, best in m["sizes"].items():
        floor = best[BARE]
        rows = []
        for label, seconds in best.items():
            target = m["targets"].get((size, label))
            rows.append([label, f"{seconds:.3f}", f"{seconds / floor:.2f}", f"≤ {target}" if target else ""])
        clients, per_round = size.split("/")
        blocks.append(f"{clients} clients, {per_round} per round, {m['rounds']} rounds:\n\n"
                      + markdown_table(["", "rounds' seconds", "× bare loop", "target"], rows))
    return ("\n\n".join(blocks) + f"\n\nRounds only, each row the fastest of {m['repeats']} interleaved runs. "
            + reproduce(m["command"]) + "\n")


if __name__ == "__main__":
    print(report(measure()))
