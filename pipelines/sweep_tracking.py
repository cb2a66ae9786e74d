"""A sweep in MLflow: one parent run per study, a nested run per trial, and the report at the end (trials.csv,
Optuna's plots, the best config)."""
from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

from pipelines.sweep_file import Sweep, absolute_paths_of, best_config, redacted
from pipelines.sweep_optuna import best_trial
from pipelines.sweep_trial import TrialOutcome, one_line

PARENT_RUN_ATTR = "mlflow_parent_run_id"


def tracker_for(sweep: Sweep):
    from orchestrator.reporting.tracking import Tracker

    cfg = absolute_paths_of(sweep.base)
    return Tracker(cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.enabled)


def start_parent_run(sweep: Sweep, study, created: bool):
    """One parent run per study: created by the driver that created the study, reused by any that join or
    resume (its id is a study user attribute)."""
    tracker = tracker_for(sweep)
    if not tracker.enabled:
        return tracker
    run_id = study.user_attrs.get(PARENT_RUN_ATTR)
    if run_id is None and not created and not study.trials:
        run_id = wait_for_parent_run(study)  # the creator is about to record it
    if run_id is not None:
        tracker.start("", {}, {}, resume_run_id=run_id)
        return tracker
    space = {f"space.{path}": json.dumps(p.model_dump(exclude_none=True)) for path, p in sweep.space.items()}
    params = {"study": sweep.study_name, "storage": redacted(sweep.storage_url), "n_trials": sweep.n_trials,
              "sampler": sweep.config.sampler.name, "pruner": sweep.config.pruner.name,
              "objective": sweep.config.objective.spec, "sweep_file": sweep.source, **space}
    tags = {"kind": "sweep", "optuna.study": sweep.study_name, "algorithm": sweep.base.algorithm.name,
            "dataset": sweep.base.data.dataset}
    tracker.start(f"sweep-{sweep.study_name}", params, tags)
    if tracker.run_id is not None:
        study.set_user_attr(PARENT_RUN_ATTR, tracker.run_id)
    return tracker


def wait_for_parent_run(study, seconds: float = 30.0) -> str | None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        run_id = study.user_attrs.get(PARENT_RUN_ATTR)
        if run_id is not None:
            return run_id
        time.sleep(0.5)
    return None


def tag_trial_run(sweep: Sweep, outcome: TrialOutcome, number: int) -> None:
    """Optuna's view of a trial on its nested MLflow run: number, state, value, reason."""
    if outcome.mlflow_run_id is None:
        return
    tracker = tracker_for(sweep)
    tracker.run_id = outcome.mlflow_run_id
    tags = {"optuna.study": sweep.study_name, "optuna.trial_number": number, "optuna.state": outcome.state}
    if outcome.reason:
        tags["optuna.reason"] = outcome.reason[:5000]
    tracker.set_tags(tags)
    if outcome.value is not None:
        tracker.log_metrics({"optuna.objective": outcome.value}, step=0)
        tracker.flush()  # the trial's run is not ended here (the run itself ended it)
    if outcome.state != "complete":
        tracker.end("KILLED" if outcome.state == "pruned" else "FAILED")


def trial_counts(sweep: Sweep, study) -> dict[str, float]:
    """The study's trials by state and this call's target: the parent run's progress, updated on every call."""
    from optuna.trial import TrialState

    counts = {f"trials_{s.name.lower()}": sum(t.state == s for t in study.trials) for s in TrialState}
    return counts | {"n_trials": sweep.n_trials}


def report_study(sweep: Sweep, study, tracker, out_dir: Path, echo) -> list[Path]:
    """trials.csv, the plots, report.html, the best parameters and config: in out_dir and on the parent run."""
    from pipelines.reports import write_study_report

    out_dir.mkdir(parents=True, exist_ok=True)
    plots = write_plots(study, out_dir, echo)
    outputs = [write_trials_csv(study, out_dir / "trials.csv"), *plots,
               write_study_report(study, sweep, plots, out_dir, tracker)]
    best = best_trial(study)
    if best is not None:
        (out_dir / "best_params.json").write_text(json.dumps(
            {"trial": best.number, "value": best.value, "params": best.params}, indent=1))
        (out_dir / "best_config.yaml").write_text(best_config(sweep, best).to_yaml())
        outputs += [out_dir / "best_params.json", out_dir / "best_config.yaml"]
    if tracker.run_id is None:
        return outputs
    metrics = trial_counts(sweep, study)
    if best is not None:
        metrics |= {"best_value": best.value, "best_trial": best.number}
        metrics |= {f"best.{k}": v for k, v in best.params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        tracker.set_tags({"best_trial": best.number, **{f"best.{k}": v for k, v in best.params.items()}})
    tracker.log_metrics(metrics, step=len(study.trials))
    for path in outputs:
        tracker.log_artifact(path)
    return outputs


def write_trials_csv(study, path: Path) -> Path:
    frame = study.trials_dataframe(attrs=("number", "state", "value", "params", "user_attrs", "datetime_start",
                                          "datetime_complete", "duration"))
    frame.to_csv(path, index=False)
    return path


def write_plots(study, out_dir: Path, echo) -> list[Path]:
    """Optuna's matplotlib plots as PNG; parameter importances need two complete trials."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    plots = {"optimization_history": ovm.plot_optimization_history, "parallel_coordinate": ovm.plot_parallel_coordinate}
    if len(complete) >= 2 and len({t.value for t in complete}) >= 2:
        plots["param_importances"] = ovm.plot_param_importances
    else:
        echo("parameter importances skipped: they need two complete trials with different values")
    written = []
    for name, plot in plots.items():
        try:
            with warnings.catch_warnings():  # e.g. a parameter with one value so far: a flat axis, and a warning
                warnings.simplefilter("ignore", UserWarning)
                ax = plot(study)
        except Exception as e:  # a plot Optuna cannot draw for this study is skipped, never the sweep
            echo(f"plot {name} skipped: {one_line(e)}")
            continue
        fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
        fig.set_size_inches(9, 5)
        fig.tight_layout()
        fig.savefig(out_dir / f"{name}.png", dpi=110)
        plt.close(fig)
        written.append(out_dir / f"{name}.png")
    return written
