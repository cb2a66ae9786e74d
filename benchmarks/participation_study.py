"""The participation study's table and figures (docs/participation.md), from finished comparisons of
configs/participation_digits.yaml: one with slow clients holding classes 7-9 (the config as it is), one ideal, and
optionally FedAvg under buffered aggregation in the slow federation.

    python -m benchmarks.participation_study --ideal DIR --slow DIR [--buffered DIR] --out DIR

For each run: the global accuracy over the last 5 rounds, the final global model's accuracy on the slow clients'
classes and on the others (from the run directory's final_state.pt), the personalized accuracy over the last 5
rounds, and the simulated time to the config's target accuracy. Prints a Markdown table of means ± std over seeds
and writes participation_classes.png (slow-class accuracy by condition) and participation_time.png (global
accuracy against simulated time in the slow federation, every method and seed) into --out.
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import torch

from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.experiment.methods import build_algorithm
from orchestrator.reporting.plots import _save, import_pyplot, plot_against_time
from orchestrator.server.participation import Participation
from pipelines.comparison import aggregate_metric
from tasks.algorithms.base import count_correct


def class_accuracies(run_dir: str, classes: list[int]) -> tuple[float, float] | None:
    """(accuracy on `classes`, on the other classes) of the run's final global model; None without one."""
    cfg = load_config(Path(run_dir) / "config.yaml")
    data = prepare_data(cfg)
    algorithm = build_algorithm(cfg, data.num_classes, data.input_shape)
    state = torch.load(Path(run_dir) / "final_state.pt", weights_only=True)
    model = algorithm.global_model(state)
    if model is None:
        return None
    x, y = data.test_sets()["test"]
    slow = torch.isin(y, torch.tensor(classes))
    return (count_correct(model, x[slow], y[slow]) / int(slow.sum()),
            count_correct(model, x[~slow], y[~slow]) / int((~slow).sum()))


def run_rows(out_dir: Path, classes: list[int]) -> list[dict]:
    histories = json.loads((out_dir / "histories.json").read_text())
    rows = []
    with open(out_dir / "runs.csv", newline="") as f:
        for run in csv.DictReader(f):
            history = histories[run["variant"]][run["seed"]]
            per_class = class_accuracies(run["run_dir"], classes)
            rows.append({"variant": run["variant"], "seed": int(run["seed"]),
                         "global_last5": aggregate_metric(history, "accuracy:last5"),
                         "slow_classes": per_class[0] if per_class else None,
                         "other_classes": per_class[1] if per_class else None,
                         "personalized_last5": aggregate_metric(history, "personalized_accuracy:last5"),
                         "time_to_target": float(run["time_to_target"]) if run["time_to_target"] else None,
                         "simulated_seconds": float(run["simulated_seconds"])})
    return rows


def mean_std(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "–"
    return f"{100 * np.mean(vals):.1f} ± {100 * np.std(vals):.1f}"


def seconds(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    return f"{np.mean(vals):.1f} ({len(vals)}/{len(values)})" if vals else f"– (0/{len(values)})"


def markdown(rows: dict[str, list[dict]]) -> str:
    lines = ["| method | condition | global, last 5 rounds (%) | final model, classes 7-9 (%) | final model, "
             "classes 0-6 (%) | personalized, last 5 rounds (%) | simulated s to 70 % (seeds) |",
             "|---|---|---|---|---|---|---|"]
    variants = list(dict.fromkeys(r["variant"] for r in rows["slow"]))
    for variant in variants:
        for condition in rows:
            mine = [r for r in rows[condition] if r["variant"] == variant]
            if not mine:
                continue
            lines.append(f"| {variant} | {condition} | {mean_std([r['global_last5'] for r in mine])} | "
                         f"{mean_std([r['slow_classes'] for r in mine])} | {mean_std([r['other_classes'] for r in mine])}"
                         f" | {mean_std([r['personalized_last5'] for r in mine])} | "
                         f"{seconds([r['time_to_target'] for r in mine])} |")
    return "\n".join(lines)


def slow_share_trained(run_dir: str, history: list[dict], classes: list[int]) -> tuple[float, float]:
    """(share of classes' samples among the clients each round kept, over the run; their share of all training
    samples): the run's round plans replayed from its config and the byte counts its history logged."""
    cfg = load_config(Path(run_dir) / "config.yaml")
    data = prepare_data(cfg)
    clock = Participation(cfg, data)
    labels = np.asarray(data.dataset.y_train)
    slow = np.array([np.isin(labels[idx], classes).sum() for idx in data.partition.train])
    sizes = np.array(data.train_sizes())
    kept_slow = kept_all = 0
    for t, metrics in enumerate(history):
        payload = metrics["bytes_down"] // max(1, metrics["clients"])
        plan = clock.plan(t, payload)
        assert len(plan.kept) == metrics["clients"], "the replay must keep the clients the run kept"
        clock.close(plan, metrics, payload)
        kept_slow, kept_all = kept_slow + slow[plan.kept].sum(), kept_all + sizes[plan.kept].sum()
    return kept_slow / kept_all, slow.sum() / sizes.sum()


def paired_drops(rows: dict[str, list[dict]]) -> str:
    """Per method and seed (the same partition in every condition): slow − ideal on classes 7-9, in points."""
    lines = ["| method | slow − ideal on classes 7-9, per seed (points) | on classes 0-6 |", "|---|---|---|"]
    ideal = {(r["variant"], r["seed"]): r for r in rows["ideal"]}
    for variant in dict.fromkeys(r["variant"] for r in rows["slow"]):
        pairs = [(r, ideal[(variant, r["seed"])]) for r in rows["slow"] if r["variant"] == variant
                 and r["slow_classes"] is not None and (variant, r["seed"]) in ideal]
        if pairs:
            cells = [", ".join(f"{100 * (s[key] - i[key]):+.1f}" for s, i in pairs) for key in ("slow_classes",
                                                                                              "other_classes")]
            lines.append(f"| {variant} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def plot_slow_classes(rows: dict[str, list[dict]], path: Path) -> None:
    variants = [v for v in dict.fromkeys(r["variant"] for r in rows["slow"])
                if any(r["slow_classes"] is not None for r in rows["slow"] if r["variant"] == v)]
    plt = import_pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    width = 0.8 / len(rows)
    for k, (condition, colour) in enumerate(zip(rows, ("#0072B2", "#D55E00", "#009E73"))):
        offset = (k - (len(rows) - 1) / 2) * width
        for i, variant in enumerate(variants):
            values = [100 * r["slow_classes"] for r in rows[condition] if r["variant"] == variant]
            if not values:
                continue
            ax.bar(i + offset, np.mean(values), width=width * 0.95, color=colour, label=condition if i == 0 else None)
            ax.plot([i + offset] * len(values), values, "k.", ms=4)
    ax.set_xticks(range(len(variants)), variants)
    ax.set_ylabel("final global model on classes 7-9 (%)")
    ax.legend(title="federation", fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Accuracy on the slow clients' classes (bars: mean; dots: seeds)", fontsize=10)
    _save(plt, fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", required=True, type=Path)
    parser.add_argument("--ideal", required=True, type=Path)
    parser.add_argument("--buffered", type=Path, help="FedAvg, buffered, in the slow federation")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--classes", default="7,8,9")
    args = parser.parse_args()
    classes = [int(c) for c in args.classes.split(",")]
    rows = {"ideal": run_rows(args.ideal, classes), "slow": run_rows(args.slow, classes)}
    curves = json.loads((args.slow / "histories.json").read_text())
    if args.buffered:
        rows["slow, buffered"] = run_rows(args.buffered, classes)
        curves |= {f"{v} (buffered)": h for v, h in json.loads((args.buffered / "histories.json").read_text()).items()}
    print(markdown(rows))
    print()
    print(paired_drops(rows))
    histories = json.loads((args.slow / "histories.json").read_text())["fedavg"]
    with open(args.slow / "runs.csv", newline="") as f:
        for run in (r for r in csv.DictReader(f) if r["variant"] == "fedavg"):
            trained, overall = slow_share_trained(run["run_dir"], histories[run["seed"]], classes)
            print(f"seed {run['seed']}: classes {args.classes} are {100 * overall:.1f} % of the training samples and "
                  f"{100 * trained:.1f} % of those the kept clients trained on")
    args.out.mkdir(parents=True, exist_ok=True)
    plot_slow_classes(rows, args.out / "participation_classes.png")
    plot_against_time(curves, args.out / "participation_time.png",
                      title="slow holders of classes 7-9: accuracy against simulated time (each line one seed)")


if __name__ == "__main__":
    main()
