"""What a comparison is and how it reads, apart from running it (pipelines/compare.py): its runs' rows and
histories (`Comparison`), a run's metric by "KEY:AGG", the summary table and its text. The report, the paired
table, the claims, the tables and the sweeps read comparisons through this module, not through the pipeline
that runs them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.reporting.results import FAIRNESS_FIGURES
from tasks.privacy.settings import EPSILON_KEYS


# ------------------------------------------------------------------------------------ metrics of a run
def aggregate_metric(history: list[dict[str, Any]], spec: str) -> float | None:
    """A "KEY:AGG" metric of one run: KEY from each round's metrics; AGG final, best, last5, top5, or last5_sync:
    the mean over the last 5 rounds in which the global model changed (model_update_norm > 0, a diagnostic of
    tasks/algorithms/diagnostics.py), so that methods which synchronise every a rounds are judged on fresh models."""
    key, _, agg = spec.partition(":")
    agg = agg or "final"
    if agg == "last5_sync":
        history, agg = [m for m in history if m.get("model_update_norm", 0) > 0], "last5"
    values = [float(m[key]) for m in history if m.get(key) is not None and not math.isnan(float(m[key]))]
    if not values:
        return None
    if agg == "final":
        return values[-1]
    if agg == "best":
        return max(values)
    if agg == "last5":
        return float(np.mean(values[-5:]))
    if agg == "top5":
        return float(np.mean(sorted(values)[-5:]))
    raise ValueError(f"metric {spec!r}: aggregation must be final, best, last5, top5 or last5_sync")


# ------------------------------------------------------------------------------------------ its runs
@dataclass
class Job:
    variant: str
    seed: int
    cfg: Any
    run_dir: str | None = None  # chosen when the run is submitted, so that a stopped run can be named
    run_name: str | None = None  # its MLflow run's name (orchestrator/reporting/run_names.py)


@dataclass
class Stopped:
    """What a stop signal left: the signal and the runs that did not finish, each with its run directory
    (None: never started)."""

    signum: int
    unfinished: list[Job]


@dataclass
class Comparison:
    rows: list[dict[str, Any]] = field(default_factory=list)
    histories: dict[str, dict[int, list[dict[str, Any]]]] = field(default_factory=dict)
    parent_run_id: str | None = None
    stopped: Stopped | None = None
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # each variant's overrides of the base

    def values(self, variant: str, spec: str) -> dict[int, float | None]:
        return {seed: aggregate_metric(h, spec) for seed, h in self.histories.get(variant, {}).items()}

    def figure(self, variant: str, name: str) -> dict[int, float | None]:
        """Per seed: a summary figure of the variant's finished runs (a key of their rows: final_global_accuracy,
        worst10_accuracy, bytes_sent, ...), or else a "KEY:AGG" metric of their histories (`values`)."""
        rows = [r for r in self.rows if r["variant"] == variant and not r.get("failed")]
        if ":" not in name and any(name in r for r in rows):
            return {r["seed"]: r.get(name) for r in rows}
        return self.values(variant, name)

    @property
    def failed(self) -> list[dict[str, Any]]:
        """The rows of the runs that failed, each with its reason under "failed"."""
        return [row for row in self.rows if row.get("failed")]

    def require_finished(self, what: str) -> None:
        """For a caller that reads every run (claims, benchmarks): a failed run is an error, not a missing seed."""
        if self.failed:
            from orchestrator.driver.run_errors import RunError

            first = self.failed[0]
            raise RunError(f"{what}: {len(self.failed)} of {len(self.rows)} runs failed, the first {first['variant']} "
                           f"seed {first['seed']}: {first['failed']}")


def absolute_paths(cfg):
    """Local paths made absolute, so runs in Ray workers write where the driver reads."""
    from orchestrator.experiment.config import with_overrides
    from orchestrator.reporting.tracking import resolve_uri

    overrides = {}
    for key, value in (("checkpoint.dir", cfg.checkpoint.dir), ("data.partitions_dir", cfg.data.partitions_dir),
                       ("data.root", cfg.data.root)):
        if "://" not in value:
            overrides[key] = str(Path(value).absolute())
    if cfg.tracking.enabled:
        overrides["tracking.uri"] = resolve_uri(cfg.tracking.uri)
    return with_overrides(cfg, overrides)


# ----------------------------------------------------------------------------------------- reporting
ACCURACIES = (("global", "final_global_accuracy"), ("personalized", "final_personalized_accuracy"))

LEGEND = ("global: the server's model on the global test set · personalized: each client's own model on its own "
          "test data · last round, %, mean ± sample standard deviation (n − 1) over seeds · –: no such model · MB sent: model traffic between "
          "server and clients, both ways, all rounds")

FAIRNESS_LEGEND = ("worst10_accuracy: the global model's mean accuracy over the worst 10 % of clients on their own "
                   "test data (the ceiling of n/10 clients, at least one) · client_accuracy_std: its spread (std) "
                   "across clients · personalized_*: the same for the clients' own models (docs/fairness.md)")

PRIVACY_LEGEND = ("ε models: client-level (ε, privacy.delta) of the model updates, trusted server · ε stats: "
                  "sample-level, per client, of its class statistics (docs/privacy.md)")


def metric_scale(metric: str) -> float:
    """Accuracies are shown in %; diagnostics (distances, cosines) as they are."""
    return 100.0 if metric.startswith(("accuracy", "personalized")) else 1.0


def mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n − 1 in the denominator) over seeds; std is None with fewer than two
    values."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    return float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else None


# the summary figures of a run (orchestrator/reporting/results.py, summary_metrics, and what compare adds), which
# --metric and --columns name; a metric of the histories is named "KEY:AGG" (aggregate_metric)
SUMMARY_FIGURES = ("final_global_accuracy", "best_global_accuracy", "final_personalized_accuracy",
                   "best_personalized_accuracy", *FAIRNESS_FIGURES, "bytes_sent", "simulated_seconds",
                   "time_to_target", *EPSILON_KEYS, "rounds", "wall_seconds")
AGGREGATIONS = ("final", "best", "last5", "top5", "last5_sync")
# the figures of the global model judged client by client, which only a run with eval.per_client logs
PER_CLIENT_FIGURES = ("client_accuracy", "client_accuracy_mean", "worst10_accuracy", "client_accuracy_std")
# the columns the table adds where the runs judged the global model client by client (eval.per_client)
FAIRNESS_COLUMNS = ("worst10_accuracy", "client_accuracy_std", "personalized_worst10_accuracy",
                    "personalized_accuracy_client_std")


def check_figure(name: str, option: str) -> str:
    """`name` if it names a summary figure or a "KEY:AGG" history metric, else a ConfigError of one line."""
    key, colon, agg = name.partition(":")
    if (colon and key and agg in AGGREGATIONS) or (not colon and name in SUMMARY_FIGURES):
        return name
    from orchestrator.experiment.config import ConfigError

    if colon:
        raise ConfigError(f"{option} {name}: expected KEY:AGG, AGG one of {', '.join(AGGREGATIONS)} "
                          "(for example accuracy_worst:final)")
    raise ConfigError(f"{option} {name}: not a summary figure; figures: {', '.join(SUMMARY_FIGURES)}; or a metric "
                      "of the rounds as KEY:AGG (for example accuracy_worst:final)")


def needs_per_client(name: str) -> bool:
    """Whether a figure or metric is of the global model judged client by client (eval.per_client)."""
    return name.partition(":")[0] in PER_CLIENT_FIGURES


def default_columns(comp: Comparison) -> list[str]:
    """The columns beside the accuracies: the fairness figures the runs logged, where they judged the global model
    client by client (eval.per_client); none otherwise."""
    if not any(r.get("worst10_accuracy") is not None for r in comp.rows):
        return []
    return [c for c in FAIRNESS_COLUMNS if any(r.get(c) is not None for r in comp.rows)]


def summary_table(comp: Comparison, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per variant, in the order the variants ran: global and personalized accuracy kept apart; and for
    each of `columns` (default: `default_columns`), a summary figure or "KEY:AGG" metric, its mean and sample
    standard deviation over seeds (COLUMN_mean, COLUMN_std)."""
    columns = default_columns(comp) if columns is None else columns
    by_variant: dict[str, list[dict]] = {}
    for row in comp.rows:
        by_variant.setdefault(row["variant"], []).append(row)
    table = []
    for variant, all_rows in by_variant.items():
        rows = [r for r in all_rows if not r.get("failed")]
        entry: dict[str, Any] = {"variant": variant, "seeds": len(rows)}
        if variant in comp.settings:
            entry["settings"] = settings_text(comp.settings[variant], variant)
        entry["global_model_note"] = global_model_note(all_rows[0].get("algorithm"))
        for name, key in ACCURACIES:
            entry[f"{name}_accuracy_mean"], entry[f"{name}_accuracy_std"] = mean_std([r[key] for r in rows])
        for column in columns:
            entry[f"{column}_mean"], entry[f"{column}_std"] = mean_std(list(comp.figure(variant, column).values()))
        entry["bytes_sent"] = mean_std([r["bytes_sent"] for r in rows])[0]
        entry["wall_seconds"] = mean_std([r["wall_seconds"] for r in rows])[0]
        for key in EPSILON_KEYS:  # privacy: the ε reached (the same for every seed of a variant)
            entry[key] = mean_std([r.get(key) for r in rows])[0]
        failed = "; ".join(f"seed {r['seed']}: {r['failed']}" for r in all_rows if r.get("failed"))
        table.append(entry | clock_columns(rows) | {"failed": failed or None})
    return table


def settings_text(overrides: dict[str, Any], variant: str) -> str:
    return ", ".join(f"{k}={v}" for k, v in own_settings(overrides, variant).items())


def own_settings(overrides: dict[str, Any], variant: str) -> dict[str, Any]:
    """A variant's overrides of the base config, less its method's name where the variant is called by it (a
    comparison of methods by name has no settings to show)."""
    return {k: v for k, v in overrides.items() if not (k == "algorithm.name" and method_label(str(v)) == variant)}


def method_label(name: str) -> str:
    """What a comparison calls the method `name`: a registered name as it is; a reference (module:Class) by its
    class's `label`, else its `name` (the class name where it sets none)."""
    if ":" not in name:
        return name
    from tasks.algorithms import ALGORITHMS

    method = ALGORITHMS.get(name)
    return method.label or method.name or method.__name__


def global_model_note(algorithm: str | None) -> str:
    """What the method's global model is, where its table cell needs saying so (Algorithm.global_model_note); ""
    for a row that names no method."""
    from tasks.algorithms import ALGORITHMS

    return ALGORITHMS.get(algorithm).global_model_note if algorithm else ""


GLOBAL_MARK = "†"


def global_cell(row: dict[str, Any]) -> str:
    """A summary row's global accuracy, marked where the method's global model needs a word (global_model_legend)."""
    cell = format_accuracy(row["global_accuracy_mean"], row["global_accuracy_std"])
    return f"{cell} {GLOBAL_MARK}" if row.get("global_model_note") and row["global_accuracy_mean"] is not None else cell


def global_model_legend(table: list[dict[str, Any]]) -> list[str]:
    """One line per note of the marked global accuracies: the variants it concerns and what their global model is."""
    notes: dict[str, list[str]] = {}
    for row in table:
        if global_cell(row).endswith(GLOBAL_MARK):
            notes.setdefault(row["global_model_note"], []).append(row["variant"])
    return [f"{GLOBAL_MARK} global model of {', '.join(variants)}: {note}" for note, variants in notes.items()]


def clock_columns(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """With a simulated clock (the participation block): its mean total over seeds, and the mean time to the
    target accuracy over the seeds that reached it, with how many did."""
    if not any(r.get("simulated_seconds") is not None for r in rows):
        return {}
    reached = [r["time_to_target"] for r in rows if r.get("time_to_target") is not None]
    return {"simulated_seconds": mean_std([r.get("simulated_seconds") for r in rows])[0],
            "time_to_target": mean_std(reached)[0], "target_reached": len(reached)}


def format_accuracy(mean: float | None, std: float | None) -> str:
    if mean is None:
        return "–"
    return f"{100 * mean:.2f} %" if std is None else f"{100 * mean:.2f} ± {100 * std:.2f} %"


def format_cell(column: str, mean: float | None, std: float | None) -> str:
    """A chosen column's cell: an accuracy (or its spread) in %, any other figure as a number."""
    if "accuracy" not in column.partition(":")[0]:
        return "–" if mean is None else f"{mean:.4g}" if std is None else f"{mean:.4g} ± {std:.2g}"
    return format_accuracy(mean, std)


def format_table(table: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """The table; ε columns (models, class statistics) only where some variant ran with privacy noise, the
    simulated clock's only where some variant ran with a participation block; then the chosen `columns` (default:
    those the rows hold, COLUMN_mean)."""
    if columns is None:
        columns = [k.removesuffix("_mean") for k in (table[0] if table else {}) if k.endswith("_mean")
                   and k not in ("global_accuracy_mean", "personalized_accuracy_mean")]
    chosen_width = [max(17, len(c)) for c in columns]
    clock = any("simulated_seconds" in row for row in table)
    private = [key for key in EPSILON_KEYS if any(row.get(key) is not None for row in table)]
    titles = {"dp_epsilon": "ε models", "dp_epsilon_stats": "ε stats"}
    width = max([28, *(len(row["variant"]) for row in table)])  # a long label keeps the columns aligned
    lines = [f"{'variant':<{width}} {'seeds':>5} {'global accuracy':>17} {'personalized accuracy':>22} {'MB sent':>9}"
             + "".join(f" {titles[key]:>9}" for key in private)
             + (f" {'sim. s':>9} {'s to target':>14}" if clock else "")
             + "".join(f" {c:>{w}}" for c, w in zip(columns, chosen_width))]
    for row in table:
        acc = [global_cell(row), format_accuracy(row["personalized_accuracy_mean"], row["personalized_accuracy_std"])]
        mb = "–" if row["bytes_sent"] is None else f"{row['bytes_sent'] / 1e6:.1f}"
        eps = "".join(f" {'–' if row.get(key) is None else format(row[key], '.2f'):>9}" for key in private)
        chosen = "".join(f" {format_cell(c, row.get(f'{c}_mean'), row.get(f'{c}_std')):>{w}}"
                         for c, w in zip(columns, chosen_width))
        lines.append(f"{row['variant']:<{width}} {row['seeds']:>5} {acc[0]:>17} {acc[1]:>22} {mb:>9}{eps}"
                     + (f" {format_clock(row)}" if clock else "") + chosen)
        if row.get("failed"):
            lines.append(f"  FAILED {row['variant']}: {row['failed']}")
    settings = [f"  {row['variant']}: {row['settings']}" for row in table if row.get("settings")]
    legend = ([LEGEND] + global_model_legend(table) + ([PRIVACY_LEGEND] if private else [])
              + ([FAIRNESS_LEGEND] if columns else []))
    return "\n".join(lines + (["settings (over the base config):", *settings] if settings else []) + legend)


def clock_cells(row: dict[str, Any]) -> tuple[str, str]:
    """The simulated total and the time to target (seeds that reached it / seeds), or dashes."""
    total = "–" if row.get("simulated_seconds") is None else f"{row['simulated_seconds']:.0f}"
    target = "–" if row.get("time_to_target") is None else f"{row['time_to_target']:.0f} ({row['target_reached']}/{row['seeds']})"
    return total, target


def format_clock(row: dict[str, Any]) -> str:
    total, target = clock_cells(row)
    return f"{total:>9} {target:>14}"
