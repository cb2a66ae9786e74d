"""Where the model is the cost: a small CNN on 28×28 images and the character LSTM on Shakespeare's roles, each
timed per round and to a target accuracy against two references measured in the same run.

The references are fresh processes on one thread each (benchmarks/model_loops.py): the efficient plain loop and
the vectorised loop (every round's clients trained at once by torch.func), on the same clients, sampled clients,
mini-batches and θ⁰ as Mooring, with Mooring's own model module, so every row follows the same trajectory
(tests/test_bench_model_cost.py). The Mooring rows run as a user runs them, at the defaults (Ray, one thread per
actor, MLflow tracking in a temporary SQLite store, checkpoints on, partial sums on, `resources.clients_on: auto`,
which puts these rounds on the row's client actors), on the engine the config chooses unless `--engine` names
one (a row each). Every row evaluates the
global model after every round; a round's seconds include that evaluation.

Per round: the mean of the rounds after the first `WARMUP`. Time to target: the rounds' seconds (start-up
excluded, every row alike) up to the end of the first round whose global accuracy reaches the workload's target,
a target every row reaches within the rounds (the trajectories are the same up to float rounding). Each row is its
fastest of `repeats` interleaved runs.

    mooring bench cnn | lstm [--rounds R] [--repeats N] [--actors 1,2] [--engine E ...] [--set KEY=VALUE ...]
"""
from __future__ import annotations

from dataclasses import dataclass

from benchmarks.common import REPO, local_ray, markdown_table, reproduce, store_overrides, temp_workdir
from benchmarks.model_loops import reference_process
from benchmarks.tiny_clients import mooring_rows, where_clients_trained

PLAIN = "efficient plain loop (fresh process, 1 thread)"
VECTORIZED = "vectorised loop, torch.func (fresh process, 1 thread)"
WARMUP = 2  # rounds left out of the per-round figure
TARGETS = {1: 1.0, 2: 0.6}  # × the plain loop, by number of actors (issue 41)
FEDAVG_SGD = ("algorithm.name=fedavg", "train.optimizer.name=sgd", "train.optimizer.momentum=0",
              "train.optimizer.weight_decay=0", "train.lr_schedule.name=constant", "data.client_test_fraction=0",
              "eval.every=1")


@dataclass(frozen=True)
class ModelWorkload:
    name: str  # the benchmark's name: `mooring bench NAME`
    title: str  # what the workload is, for the report
    config: str  # the base config, in configs/
    overrides: tuple[str, ...]
    rounds: int
    target: float  # the global accuracy every row's time is taken to


CNN = ModelWorkload(
    "cnn", "acar_cnn (two 5×5 convolutions of 32 channels, FC 384-192, 10 classes; 0.30 M parameters) on the "
    "digits upsampled to 28×28 (`digits_28`), 100 clients of Dirichlet α = 0.5 sizes, 10 a round, 2 local epochs "
    "of batch 16, SGD lr 0.05", "default.yaml",
    ("data.dataset=digits_28", "data.test_fraction=0.15", "data.num_clients=100", "train.clients_per_round=10",
     "data.partition.kind=dirichlet", "data.partition.alpha=0.5", "data.partition.min_size=1",
     "data.partition.repair=true", "model.name=acar_cnn", "model.hidden=384", "model.feature_dim=192",
     "train.local_epochs=2", "train.batch_size=16", "train.optimizer.lr=0.05"),
    rounds=24, target=0.82)

LSTM = ModelWorkload(
    "lstm", "char_rnn with `cell: lstm` (embedding 8, one LSTM layer of 64, 80 characters; 25 k parameters) on "
    "Shakespeare's speaking roles (`shakespeare`, sequences of 40 characters, each role's last 3 % the test set), "
    "the 100 largest roles as clients, 10 a round, 1 local epoch of batch 16, SGD lr 1.0", "shakespeare.yaml",
    ("data.test_fraction=0.03", "data.num_clients=100", "train.clients_per_round=10", "model.cell=lstm",
     "model.hidden=64", "train.local_epochs=1", "train.batch_size=16", "train.optimizer.lr=1.0", "checkpoint.every=5"),
    rounds=16, target=0.305)

WORKLOADS = {w.name: w for w in (CNN, LSTM)}


def workload_overrides(w: ModelWorkload, rounds: int) -> list[str]:
    return [*FEDAVG_SGD, *w.overrides, f"train.rounds={rounds}"]


@dataclass
class Row:
    round_seconds: list[float]
    accuracies: list[float]

    def per_round(self) -> float:
        steady = self.round_seconds[WARMUP:] or self.round_seconds
        return sum(steady) / len(steady)

    def round_at(self, target: float) -> int | None:
        """The first round (from 1) whose global accuracy is `target` or above (None: none)."""
        return next((r + 1 for r, accuracy in enumerate(self.accuracies) if accuracy >= target), None)

    def seconds_to(self, target: float) -> float | None:
        """The rounds' seconds up to the end of the first round at `target` accuracy or above (None: never)."""
        at = self.round_at(target)
        return None if at is None else sum(self.round_seconds[:at])


def reference_row(config: str, overrides: list[str], cwd: str, vectorized: bool) -> Row:
    out = reference_process(config, overrides, cwd, vectorized)
    ends = out["round_ends"]
    return Row([b - a for a, b in zip([0.0, *ends[:-1]], ends)], out["accuracies"])


def mooring_row(cfg) -> tuple[Row, str]:
    """Mooring's rounds as `mooring run` runs them: (the row, where the clients trained if not on the actors)."""
    from orchestrator.driver.run import run_experiment

    result = run_experiment(cfg, progress=False)
    return Row(list(result.round_seconds), [m.get("accuracy", 0.0) for m in result.history]), \
        where_clients_trained(result.run_dir)


def measure(workload: str, rounds: int | None = None, repeats: int = 1, actors: tuple[int, ...] = (1, 2),
            engines: tuple[str | None, ...] = (None,), mooring_overrides: tuple[str, ...] = ()) -> dict:
    """`mooring_overrides` apply to the Mooring rows only."""
    from orchestrator.experiment.config import load_config

    w = WORKLOADS[workload]
    rounds = rounds or w.rounds
    config = str(REPO / "configs" / w.config)
    best: dict[str, Row] = {}
    targets: dict[str, float] = {}
    with temp_workdir() as tmp, local_ray():
        base = workload_overrides(w, rounds) + store_overrides(tmp)
        for _ in range(repeats):
            rows = {PLAIN: reference_row(config, base, tmp, vectorized=False),
                    VECTORIZED: reference_row(config, base, tmp, vectorized=True)}
            for label, n, overrides in mooring_rows(actors, engines):
                cfg = load_config(config, base + overrides + list(mooring_overrides))
                row, where = mooring_row(cfg)
                rows[label + where] = row
                if n in TARGETS:
                    targets[label + where] = TARGETS[n]
            for label, row in rows.items():
                if label not in best or sum(row.round_seconds) < sum(best[label].round_seconds):
                    best[label] = row
    return {"workload": w.name, "rounds": rounds, "repeats": repeats, "rows": best, "targets": targets,
            "command": command(w.name, rounds, repeats, actors, engines, mooring_overrides)}


def command(name: str, rounds: int, repeats: int, actors, engines, mooring_overrides=()) -> str:
    parts = [f"mooring bench {name}", f"--rounds {rounds}", f"--repeats {repeats}",
             f"--actors {','.join(map(str, actors))}", *(f"--engine {e}" for e in engines if e)]
    return " ".join(parts + [f"--set {o}" for o in mooring_overrides])


def ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}" if value is not None and base else "–"


def verdict(row: Row, plain: Row, target: float, limit: float) -> str:
    """Whether the row is within `limit` × the plain loop both per round and to the target accuracy."""
    to_target, plain_to_target = row.seconds_to(target), plain.seconds_to(target)
    within = (row.per_round() <= limit * plain.per_round() and to_target is not None
              and plain_to_target is not None and to_target <= limit * plain_to_target)
    return f"≤ {limit} × the plain loop: {'met' if within else 'not met'}"


def report(m: dict) -> str:
    w, rows = WORKLOADS[m["workload"]], m["rows"]
    target = w.target
    plain, vec = rows[PLAIN], rows[VECTORIZED]
    table = []
    for label, row in rows.items():
        to_target = row.seconds_to(target)
        limit = m["targets"].get(label)
        table.append([label, f"{row.per_round():.3f}", ratio(row.per_round(), plain.per_round()),
                      ratio(row.per_round(), vec.per_round()),
                      "not reached" if to_target is None else f"{to_target:.2f} (round {row.round_at(target)})",
                      ratio(to_target, plain.seconds_to(target)), ratio(to_target, vec.seconds_to(target)),
                      f"{max(row.accuracies):.3f}", "" if limit is None else verdict(row, plain, target, limit)])
    header = ["", "s a round", "× plain loop", "× vectorised loop", f"s to {target:.1%} accuracy", "× plain loop",
              "× vectorised loop", "best accuracy", "target (both figures)"]
    return (f"{w.title}; {m['rounds']} rounds, the global model evaluated after each:\n\n"
            + markdown_table(header, table)
            + f"\n\nA round: the mean of rounds {WARMUP + 1} to {m['rounds']} (the first {WARMUP} are warm-up). "
            f"To {target:.1%}: the rounds' seconds up to the first round at or above it, start-up excluded for every "
            "row. Mooring's rows: the defaults (the engine as the config chooses unless named). "
            f"Each row the fastest of {m['repeats']} interleaved run(s). " + reproduce(m["command"]) + "\n")
