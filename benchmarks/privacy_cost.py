"""What privacy costs in accuracy (docs/privacy.md, "The cost, measured"): every method that shares a model or
class statistics, on configs/privacy_digits.yaml, without privacy and at several noise multipliers z (the same z
for the model updates and for the class statistics), over a few seeds, through `mooring compare` (Ray, MLflow).

    python -m benchmarks.privacy_cost --out /tmp/privacy-cost [--seeds 0,1,2] [--levels 0.1,0.3,1,3]
    python -m benchmarks.privacy_cost --out /tmp/pooled --levels 0.3,1,3 --merge /tmp/privacy-cost /tmp/seed2
    python -m benchmarks.privacy_cost --config configs/shakespeare.yaml --set privacy.models.clip=1 \
        --set privacy.stats.clip=4 --methods fedavg,fedfa,fednh --levels 1 --seeds 0 --out /tmp/privacy-shakespeare

Writes OUT/privacy_table.md (accuracy mean ± std over seeds, ε of each mechanism) and OUT/privacy_cost.png
(accuracy against ε), with the comparison's own outputs under OUT/compare; runs and MLflow store under OUT.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from benchmarks.common import markdown_table

CONFIG = "configs/privacy_digits.yaml"
METHODS = ("fedavg", "fedproto", "fedsa", "fednh", "fedfa", "fedfm")
HEADLINE = {"fedproto": "personalized_accuracy", "fedsa": "personalized_accuracy"}  # no global model
OFF = {"privacy.models.clip": None, "privacy.models.noise_multiplier": 0.0,
       "privacy.stats.clip": None, "privacy.stats.noise_multiplier": 0.0}
UNIT_FEATURES = {"fednh"}  # its features are ℓ2-normalised: a feature clip of 1 clips nothing


def variants(methods: list[str], levels: list[float]) -> dict[str, dict]:
    out = {}
    for method in methods:
        base = {"algorithm.name": method, **({"privacy.stats.clip": 1.0} if method in UNIT_FEATURES else {})}
        out[f"{method} off"] = {"algorithm.name": method, **OFF}
        for z in levels:
            out[f"{method} z={z:g}"] = {**base, "privacy.models.noise_multiplier": z, "privacy.stats.noise_multiplier": z}
    return out


def final(history: list[dict], key: str) -> float | None:
    values = [m[key] for m in history if m.get(key) is not None and not math.isnan(float(m[key]))]
    return float(values[-1]) if values else None


def summarise(histories: dict[str, dict], levels: list[float]) -> list[dict]:
    """Per (method, level): the headline accuracy over seeds, and the ε of each mechanism; `histories`:
    {variant: {seed: history}}, as compare's histories.json holds them."""
    rows = []
    for method in METHODS:
        for level in [None, *levels]:
            name = f"{method} off" if level is None else f"{method} z={level:g}"
            runs = list(histories.get(name, {}).values())
            if not runs:
                continue
            accs = [final(h, HEADLINE.get(method, "accuracy")) for h in runs]
            accs = [a for a in accs if a is not None]
            rows.append({"method": method, "z": level, "seeds": len(accs), "mean": float(np.mean(accs)),
                         "std": float(np.std(accs)), "eps_models": final(runs[0], "dp_epsilon"),
                         "eps_stats": final(runs[0], "dp_epsilon_stats")})
    return rows


def table(rows: list[dict]) -> str:
    def eps(v):
        return "–" if v is None else f"{v:.2f}"
    body = [[r["method"], "off" if r["z"] is None else f"{r['z']:g}", r["seeds"],
             f"{100 * r['mean']:.1f} ± {100 * r['std']:.1f}", eps(r["eps_models"]), eps(r["eps_stats"])] for r in rows]
    return markdown_table(["method", "z", "seeds", "accuracy % (mean ± std)", "ε models", "ε stats"], body)


def plot(rows: list[dict], path: Path, task: str = "the digits") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {method: plt.get_cmap("tab10")(i) for i, method in enumerate(METHODS)}  # one colour per method
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), sharey=True)
    for ax, key, title in ((axes[0], "eps_models", "model updates: client-level ε (δ = 1e-5)"),
                           (axes[1], "eps_stats", "class statistics: sample-level ε (δ = 1e-5)")):
        for method in METHODS:
            points = [(r[key], r["mean"], r["std"]) for r in rows if r["method"] == method and r[key] is not None]
            off = [r["mean"] for r in rows if r["method"] == method and r["z"] is None]
            if not points:
                continue
            x, y, err = zip(*sorted(points))
            ax.errorbar(x, [100 * v for v in y], yerr=[100 * e for e in err], marker="o", capsize=3,
                        color=colors[method], label=method)
            if off:
                ax.axhline(100 * off[0], color=colors[method], linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("ε after the last round")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("final accuracy % (FedProto, FedSA: personalized)")
    handles = {h.get_label(): h for ax in axes for h in ax.get_legend_handles_labels()[0]}
    fig.legend([handles[m] for m in METHODS if m in handles], [m for m in METHODS if m in handles],
               loc="lower center", ncol=len(METHODS), fontsize=9)
    fig.suptitle(f"Accuracy against ε on {task} (dotted: the same method without privacy)", fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)


def merged_histories(dirs: list[str]) -> dict[str, dict]:
    """The histories of earlier runs of this benchmark (their OUT directories), seeds pooled per variant."""
    out: dict[str, dict] = {}
    for directory in dirs:
        for variant, by_seed in json.loads((Path(directory) / "compare" / "histories.json").read_text()).items():
            out.setdefault(variant, {}).update(by_seed)
    return out


def main(argv: list[str] | None = None) -> None:
    from orchestrator.experiment.config import load_config
    from pipelines.compare import compare

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/privacy-cost")
    parser.add_argument("--config", default=CONFIG, help="the experiment (its privacy block gives C and the feature clip)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override of the config")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--levels", default="0.1,0.3,1,3", help="noise multipliers z")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--parallel", type=int, default=None)
    parser.add_argument("--merge", nargs="+", metavar="DIR", default=None,
                        help="run nothing: the table and plot of earlier OUT directories, their seeds pooled")
    args = parser.parse_args(argv)
    out = Path(args.out)
    seeds = [int(s) for s in args.seeds.split(",")]
    levels = [float(z) for z in args.levels.split(",")]
    task = "the digits" if args.config == CONFIG else Path(args.config).stem
    if args.merge:
        return report(merged_histories(args.merge), levels, out, task)
    base = load_config(args.config, [*args.set, f"checkpoint.dir={out / 'runs'}",
                                     f"data.partitions_dir={out / 'partitions'}",
                                     f"tracking.uri=sqlite:///{out / 'mlflow.db'}"])
    comp = compare(base, variants(args.methods.split(","), levels), seeds, out / "compare", parallel=args.parallel,
                   progress=False)
    comp.require_finished("privacy cost")
    report(comp.histories, levels, out, task)


def report(histories: dict[str, dict], levels: list[float], out: Path, task: str = "the digits") -> None:
    rows = summarise(histories, levels)
    out.mkdir(parents=True, exist_ok=True)
    (out / "privacy_table.md").write_text(table(rows) + "\n")
    plot(rows, out / "privacy_cost.png", task)
    print(table(rows))


if __name__ == "__main__":
    main()
