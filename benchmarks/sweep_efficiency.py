"""Sweep efficiency: TPE with median pruning against a full grid over the same discretised space.

FedFA on digits (FedProx where FedFA is not registered): the anchor-loss weight μ, the anchor momentum λ and
the learning rate, each a categorical of a few values, so the grid and TPE search exactly the same points.
The grid runs every point to the last round; TPE proposes points and the median pruner stops the weak ones.
Cost is counted in client-rounds: Σ over trials of the rounds run × the clients trained per round.

TPE passes when the best value it has found comes within 1 accuracy point of the grid's best while the trials
started by then have cost at most a quarter of the grid's client-rounds (a trial running at that moment is
counted in full, so the figure errs against TPE).

    python -m benchmarks.sweep_efficiency [--rounds 8] [--clients 5] [--tpe-trials 16] [--out table.md]
    (or: mooring bench sweep)
"""
from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.01  # one accuracy point
BUDGET = 0.25  # of the grid's client-rounds
SPACES = {
    "fedfa": {"algorithm.fedfa.mu": [0.01, 0.1, 1.0], "algorithm.fedfa.lam": [0.0, 0.5, 0.9],
              "train.optimizer.lr": [0.03, 0.1, 0.3]},
    "fedprox": {"algorithm.fedprox.mu": [0.001, 0.01, 0.1, 1.0], "data.partition.alpha": [0.1, 0.5],
                "train.optimizer.lr": [0.03, 0.1, 0.3]},
}


def pick_algorithm() -> str:
    from tasks.algorithms import ALGORITHMS

    return "fedfa" if "fedfa" in ALGORITHMS else "fedprox"


def write_sweep(work: Path, name: str, algorithm: str, rounds: int, clients: int, **fields) -> Path:
    body = {
        "base": str(ROOT / "configs" / "default.yaml"),
        "overrides": {"algorithm.name": algorithm, "train.rounds": rounds, "data.num_clients": clients,
                      "checkpoint.every": 0, "checkpoint.dir": str(work / "runs"),
                      "data.partitions_dir": str(work / "partitions"), "tracking.enabled": False},
        "params": {path: {"type": "categorical", "choices": values} for path, values in SPACES[algorithm].items()},
        "objective": {"metric": "accuracy", "aggregate": "final"},
        "storage": f"sqlite:///{work / 'optuna.db'}", **fields,
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def cost_curve(study) -> list[tuple[float, int]]:
    """(best value so far, client-rounds of every trial started by then), at each trial's completion."""
    trials = [t for t in study.trials if t.datetime_complete is not None]
    curve, best = [], float("-inf")
    for t in sorted(trials, key=lambda t: t.datetime_complete):
        if t.state.name == "COMPLETE":
            best = max(best, t.value)
        spent = sum(u.user_attrs.get("client_rounds", 0) for u in study.trials
                    if u.datetime_start is not None and u.datetime_start <= t.datetime_complete)
        curve.append((best, spent))
    return curve


def measure(rounds: int = 8, clients: int = 5, tpe_trials: int = 16, parallel: int | None = None,
            address: str | None = None, seed: int = 0, echo=None) -> dict:
    from pipelines.sweep import run_sweep
    from pipelines.sweep_file import load_sweep
    from pipelines.sweep_optuna import quiet_optuna

    echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    algorithm = pick_algorithm()
    work = Path(tempfile.mkdtemp(prefix="mooring-bench-sweep-"))
    grid_size = len(list(itertools.product(*SPACES[algorithm].values())))
    grid = write_sweep(work, "grid", algorithm, rounds, clients, sampler={"name": "grid", "seed": seed},
                       pruner={"name": "none"}, parallel=parallel)
    tpe = write_sweep(work, "tpe", algorithm, rounds, clients, n_trials=tpe_trials, parallel=parallel,
                      sampler={"name": "tpe", "seed": seed, "n_startup_trials": 4},
                      pruner={"name": "median", "n_startup_trials": 2, "n_warmup_steps": 2})
    optuna = quiet_optuna()
    studies = {}
    for path in (grid, tpe):
        sweep = load_sweep(path)
        run_sweep(sweep, address=address, echo=echo)
        studies[path.stem] = optuna.load_study(study_name=sweep.study_name, storage=sweep.storage_url)
    grid_curve, tpe_curve = cost_curve(studies["grid"]), cost_curve(studies["tpe"])
    grid_best, grid_cost = grid_curve[-1]
    reached = next((spent for best, spent in tpe_curve if best >= grid_best - TOLERANCE), None)
    tpe_trials_run = studies["tpe"].trials
    return {
        "algorithm": algorithm, "rounds": rounds, "clients": clients, "grid_trials": grid_size,
        "grid_best": grid_best, "grid_client_rounds": grid_cost,
        "tpe_trials": sum(t.state.name in ("COMPLETE", "PRUNED") for t in tpe_trials_run),
        "tpe_pruned": sum(t.state.name == "PRUNED" for t in tpe_trials_run),
        "tpe_best": tpe_curve[-1][0], "tpe_client_rounds": tpe_curve[-1][1], "tpe_client_rounds_to_reach": reached,
        "ratio": None if reached is None else reached / grid_cost,
        "passed": reached is not None and reached <= BUDGET * grid_cost,
    }


def markdown_table(header: list[str], rows: list[list]) -> str:
    # benchmarks.common has the same helper, but importing it needs psutil, which this benchmark does not
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def report(m: dict) -> str:
    def pct(v):
        return f"{100 * v:.2f}%"

    grid_cost = m["grid_client_rounds"]
    reach = m["tpe_client_rounds_to_reach"]
    rows = [
        [f"full grid ({m['grid_trials']} points)", m["grid_trials"], 0, pct(m["grid_best"]), grid_cost, "1.00", "-", "-"],
        ["TPE + median pruning", m["tpe_trials"], m["tpe_pruned"], pct(m["tpe_best"]), m["tpe_client_rounds"],
         f"{m['tpe_client_rounds'] / grid_cost:.2f}", "not reached" if reach is None else reach,
         "-" if m["ratio"] is None else f"{m['ratio']:.2f}"],
    ]
    table = markdown_table(["search", "trials", "pruned", "best accuracy", "client-rounds", "÷ grid",
                            "client-rounds to within 1 pt of the grid's best", "÷ grid"], rows)
    verdict = "passes" if m["passed"] else "does not pass"
    spent = "never" if m["ratio"] is None else f"after {m['ratio']:.2f}"
    return (f"{m['algorithm']} on digits, {m['clients']} clients, {m['rounds']} rounds per trial. TPE {verdict}: within 1 "
            f"point of the grid's best {spent} of the grid's client-rounds (target ≤ {BUDGET}).\n\n{table}")


def configure(parser) -> None:
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--tpe-trials", type=int, default=16)
    parser.add_argument("--parallel", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--address", default=None)
    parser.add_argument("--out", default=None, help="write the table as markdown to this file")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_efficiency", description=__doc__.splitlines()[0])
    configure(parser)
    args = parser.parse_args(argv)
    m = measure(args.rounds, args.clients, args.tpe_trials, args.parallel, args.address, args.seed)
    text = report(m)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0 if m["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
