"""The shareable reports of `mooring compare` and `mooring sweep` (report.html; orchestrator/reporting/report.py renders
them): what a comparison or a study found, with a link from each run to its MLflow run."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.reporting import report
from pipelines.comparison import (
    ACCURACIES,
    FAIRNESS_LEGEND,
    LEGEND,
    Comparison,
    clock_cells,
    format_accuracy,
    format_cell,
    global_cell,
    global_model_legend,
)


def write_comparison_report(comp: Comparison, table: list[dict[str, Any]], variants: dict[str, dict[str, Any]],
                            out_dir: Path, title: str, tracker, baseline: str | None = None,
                            columns: list[str] | None = None, metrics: list[str] | None = None) -> Path:
    """report.html: the summary table (each variant's settings, then the chosen `columns`), with a baseline the
    paired differences against it (on `metrics`, default the accuracies), the accuracy plot and every run with its
    parameters and MLflow run."""
    columns = columns or []
    def mb(value: float | None) -> str | None:
        return None if value is None else f"{value / 1e6:.1f}"

    clock = any("simulated_seconds" in row for row in table)  # the participation block's simulated clock
    summary = report.Table("Summary", ["variant", "settings", "seeds", "global accuracy", "personalized accuracy",
                                       "MB sent", "seconds a run"] + (["simulated seconds", "to target"] if clock else [])
                           + columns,
                           [[row["variant"], row.get("settings") or None, str(row["seeds"]), global_cell(row),
                             format_accuracy(row["personalized_accuracy_mean"], row["personalized_accuracy_std"]),
                             mb(row["bytes_sent"]), None if row["wall_seconds"] is None else f"{row['wall_seconds']:.0f}"]
                            + (list(clock_cells(row)) if clock else [])
                            + [format_cell(c, row.get(f"{c}_mean"), row.get(f"{c}_std")) for c in columns]
                            for row in table])
    runs = report.Table("Runs", ["variant", "parameters", "seed", "global accuracy", "personalized accuracy", "rounds",
                                 "MLflow run"],
                        [[row["variant"], ", ".join(f"{k}={v}" for k, v in variants[row["variant"]].items()),
                          str(row["seed"]), *[format_accuracy(row[key], None) for _, key in ACCURACIES],
                          f"failed: {row['failed']}" if row.get("failed") else str(row["rounds"]),
                          run_link(tracker, row["mlflow_run_id"])] for row in comp.rows])
    figures = [report.Figure("Accuracy by round", out_dir / "accuracy.png")]
    if clock:
        figures.append(report.Figure("Accuracy against simulated time", out_dir / "accuracy_time.png"))
    notes = ([report.Note(LEGEND)] + [report.Note(line) for line in global_model_legend(table)]
             + ([report.Note(FAIRNESS_LEGEND)] if columns else []))
    parts = [summary, *notes, *paired_parts(comp, baseline, metrics), *figures, runs] + links_note(tracker)
    subtitle = comparison_subtitle(comp)
    report.write_markdown(out_dir / "report.md", title, subtitle, parts)
    return report.write_report(out_dir / "report.html", title, subtitle, parts)


def comparison_subtitle(comp: Comparison) -> str:
    """What the comparison ran: its runs, their seeds and their wall time added up."""
    seeds = sorted({row["seed"] for row in comp.rows})
    seconds = sum(row.get("wall_seconds") or 0.0 for row in comp.rows)
    return (f"mooring compare: {len(comp.rows)} runs (seeds {', '.join(map(str, seeds))}), "
            f"{seconds / 60:.1f} minutes of runs in all")


def paired_parts(comp: Comparison, baseline: str | None, metrics: list[str] | None = None) -> list[report.Part]:
    """The paired differences against the baseline (pipelines/paired.py), as a table and its note; none without."""
    if baseline is None:
        return []
    from pipelines.paired import interval_text, p_text, paired_rows, per_seed

    rows = paired_rows(comp, baseline, metrics)
    return [report.Table(f"Paired against {baseline} (variant − {baseline}; accuracies in percentage points)",
                         ["variant", "metric", "seeds", "per seed", "mean", "95 % interval", "wins", "p"],
                         [[r.variant, r.label, ", ".join(map(str, r.seeds)), per_seed(r), f"{r.scale * r.mean:+.2f}",
                           interval_text(r.interval, r.scale), f"{r.wins}/{len(r.diffs)}", p_text(r.p_value)]
                          for r in rows]),
            report.Note("per seed on the same partition; 95 % interval: mean ± t(0.975, n − 1) · sample std / √n; "
                        "wins: seeds where the variant is better (higher; lower where marked ↓); p: one-sided paired "
                        "t-test, variant better (as `mooring claims` judges a claim)")]


def write_study_report(study, sweep, plots: list[Path], out_dir: Path, tracker) -> Path:
    """report.html of a sweep: the best trial, Optuna's plots and every trial with its parameters, its state
    (with the reason of a pruned or failed one) and its MLflow run."""
    from pipelines.best_on_test import recorded
    from pipelines.sweep_optuna import best_trial

    best = best_trial(study)
    parts: list[report.Part] = []
    if best is not None:
        tested = recorded(study)
        on_test = None if tested is None or tested.test is None else f"{tested.test:.4f}"
        spec = sweep.config.objective.spec
        parts.append(report.Table("Best trial", ["trial", f"{spec} (validation)", f"{spec} on the test set",
                                                 "parameters"],
                                  [[str(best.number), f"{best.value:.4f}", on_test, parameters(best.params)]]))
        parts.append(report.Note("Trials are scored on their validation split; " + (
            "the best trial's config is run once on the test sets (pipelines/best_on_test.py)."
            if sweep.config.test_best else "the sweep does not run the best trial on the test sets (test_best: false).")))
    parts += [report.Figure(path.stem.replace("_", " ").capitalize(), path) for path in plots]
    parts.append(report.Table("Trials", ["trial", "state", "value", "parameters", "reason", "MLflow run"],
                              [[str(t.number), t.state.name.lower(), None if t.value is None else f"{t.value:.4f}",
                                parameters(t.params), t.user_attrs.get("fail_reason") or t.user_attrs.get("pruned_reason"),
                                run_link(tracker, t.user_attrs.get("mlflow_run_id"))] for t in study.trials]))
    title = f"sweep {sweep.study_name}: {sweep.base.algorithm.name} on {sweep.base.data.dataset}"
    subtitle = f"mooring sweep · objective {sweep.config.objective.spec} · {sweep.n_trials} trials asked for"
    return report.write_report(out_dir / "report.html", title, subtitle, parts + links_note(tracker))


def parameters(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def run_link(tracker, run_id: str | None) -> report.Link | None:
    if run_id is None or tracker.experiment_id is None:
        return None
    return report.Link(run_id[:8], report.mlflow_run_url(tracker.uri, tracker.experiment_id, run_id))


def links_note(tracker) -> list[report.Part]:
    return [report.Note(report.where_links_open(tracker.uri))] if tracker.experiment_id is not None else []
