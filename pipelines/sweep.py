"""`mooring sweep`: an Optuna study whose trials are federated runs on Ray.

    run_sweep(load_sweep("configs/sweeps/fedfa.yaml"))
      ├─ open (or create) the study in its RDB storage; one MLflow parent run per study, reused on resume
      ├─ trials left RUNNING by a driver that is gone → FAIL (reason recorded), their parameters enqueued again
      ├─ until n_trials trials are COMPLETE or PRUNED (counted in the storage, so several drivers can share it):
      │     study.ask() → trial config → Ray task (num_cpus=0) → run_experiment with its own client actor
      │     in the task: trial.report(accuracy, round) every round; should_prune() → TrialPruned stops the run
      │     study.tell(COMPLETE | PRUNED | FAIL), with the reason of a failure as the trial's "fail_reason"
      ├─ the best trial's config run once more on the test sets, unless test_best is off (trials see only their validation
      │  split: pipelines/sweep_objective.py), recorded in the study (pipelines/best_on_test.py)
      └─ at the end, on the parent run: best parameters, trials.csv, Optuna's plots, the best config as YAML

A trial that diverges (a NaN or infinite loss) is pruned, so the sampler learns to avoid its region; one
that raises is failed. Neither stops the sweep. Trials that fail do not count towards n_trials; once max_failures
of them have failed the sweep stops (exit 1). SIGINT or SIGTERM stops it too (exit 130 or 143), saying what the
study keeps; the same command resumes it.

By concern: sweep_config.py (the file's schema), sweep_file.py (a sweep file made ready: base, search space,
storage), sweep_optuna.py (storage, sampler, pruner, study), sweep_trial.py (one trial as a Ray task),
sweep_driver.py (asking for trials and running them; several drivers per study), driver_liveness.py (the
drivers' heartbeats, stale trials retried), trial_outcomes.py (telling a finished trial), study_trials.py (the
study's trials counted by state), sweep_tracking.py (MLflow and the report), trial_store.py (what trials and
drivers record in the storage); here, the pipeline and its result.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.driver.preflight import check_variants
from orchestrator.driver.run_errors import RunError
from orchestrator.driver.signals import RunInterrupted, StopSignals
from orchestrator.io import storage
from pipelines.best_on_test import measure_best_on_test, recorded
from pipelines.sweep_driver import Driver, SweepResult, format_params
from pipelines.sweep_file import Sweep, best_config, redacted
from pipelines.sweep_objective import shown
from pipelines.sweep_optuna import best_trial, open_storage, open_study, quiet_optuna
from pipelines.sweep_tracking import report_study, start_parent_run, trial_counts
from pipelines.trial_store import TrialStore


# ------------------------------------------------------------------------------------------ pipeline
def run_sweep(sweep: Sweep, *, address: str | None = None, echo=print) -> SweepResult:
    """The sweep, SIGINT and SIGTERM recorded from the start: the driver stops at its next look, the trials
    running failed and enqueued again, and RunInterrupted says what the study keeps (a second signal interrupts
    at once)."""
    with StopSignals() as stop:
        stop.in_rounds = True
        return _run_sweep(sweep, address, echo, stop)


def _run_sweep(sweep: Sweep, address: str | None, echo, stop: StopSignals) -> SweepResult:
    from orchestrator.ray_runtime.ray_start import ensure_ray
    from pipelines.parallel_runs import default_parallel

    check_variants(searched_variants(sweep))
    storage_obj = open_storage(sweep.storage_url)
    study, created = open_study(sweep, storage_obj)
    if created:
        for params in sweep.config.enqueue:
            study.enqueue_trial(params)
    tracker = start_parent_run(sweep, study, created)
    try:
        ensure_ray(address)
    except RunError:
        tracker.end("FAILED")
        raise
    stop.install()  # again: ray.init put its own SIGTERM handler (an exit that can abort Ray's threads) in place
    parallel = sweep.parallel or default_parallel(1, sweep.base.resources.cpus_per_actor)
    # n_trials is a param of the first call only (MLflow params never change): each call records its own
    tracker.set_tags({"n_trials": sweep.n_trials})
    tracker.log_summary(trial_counts(sweep, study), step=len(study.trials))
    driver = Driver(sweep, study, TrialStore(storage_obj, sweep.study_name), tracker.run_id, parallel, echo)
    c = driver.counts()
    echo(f"sweep {sweep.study_name}: {len(sweep.space)} parameters, {sweep.n_trials} trials, {parallel} at a time, "
         f"storage {redacted(sweep.storage_url)}"
         + (f"; resuming: {c['complete']} complete, {c['pruned']} pruned, {c['failed']} failed" if not created else ""))
    try:
        driver.run(stop)
        if sweep.config.test_best:
            measure_best_on_test(sweep, storage_obj, study, tracker)
    except BaseException as e:
        tracker.end("KILLED" if isinstance(e, (KeyboardInterrupt, RunInterrupted)) else "FAILED")
        raise
    outputs = report_study(sweep, study, tracker, local_dir(sweep.sweep_dir), echo)
    tracker.end("FINISHED")
    c = driver.counts()
    best = best_trial(study)
    return SweepResult(sweep.study_name, sweep.storage_url, c["complete"], c["pruned"], c["failed"],
                       best.number if best else None, best.value if best else None, best.params if best else {},
                       tracker.run_id, [str(p) for p in outputs],
                       None if storage.is_remote(sweep.sweep_dir) else sweep.sweep_dir)


def searched_variants(sweep: Sweep) -> dict[str, Any]:
    """The base experiment, and it under each choice of a searched method or engine: the configs whose refusals
    (orchestrator/driver/preflight.py) come before any trial runs."""
    from orchestrator.experiment.config import with_overrides
    from pipelines.sweep_config import CategoricalParam

    configs = {"the base experiment": sweep.base}
    for path in ("algorithm.name", "train.engine"):
        param = sweep.space.get(path)
        for choice in param.choices if isinstance(param, CategoricalParam) else []:
            configs[f"params.{path} = {choice}"] = with_overrides(sweep.base, {path: choice})
    return configs


def local_dir(path: str) -> Path:
    """The sweep's output directory, or a temporary one when it is on object storage (MLflow keeps them)."""
    return Path(tempfile.mkdtemp(prefix="mooring-sweep-")) if storage.is_remote(path) else Path(path)


# --------------------------------------------------------------------------------------------- best
def load_best(sweep: Sweep):
    """(best trial, its ready-to-run config) of a finished or running study."""
    optuna = quiet_optuna()
    try:
        study = optuna.load_study(study_name=sweep.study_name, storage=open_storage(sweep.storage_url))
    except KeyError:
        raise RunError(f"no study {sweep.study_name!r} in {redacted(sweep.storage_url)}; run the sweep first") from None
    best = best_trial(study)
    if best is None:
        raise RunError(f"study {sweep.study_name!r} has no complete trial yet")
    return best, best_config(sweep, best)


def best_recorded_on_test(storage_url: str, study_name: str):
    """The BestOnTest recorded in the study for its best trial, or None."""
    optuna = quiet_optuna()
    return recorded(optuna.load_study(study_name=study_name, storage=open_storage(storage_url)))


def print_result(result: SweepResult, metric: str, out=None) -> None:
    out = out or sys.stdout  # looked up per call: a redirected or replaced stdout must be honoured
    print(f"study {result.study_name}: {result.complete} complete, {result.pruned} pruned, {result.failed} failed",
          file=out)
    if result.best_number is not None:
        print(f"best trial {result.best_number}: {metric} = {result.best_value:.6f} ({shown(result.best_value, metric)})  "
              f"{format_params(result.best_params)}", file=out)
    tested = best_recorded_on_test(result.storage_url, result.study_name)
    if tested is not None:
        print(tested.line(metric), file=out)
    saved = saved_line(result)
    if saved:
        print(saved, file=out)
    if result.parent_run_id:
        print(f"MLflow parent run {result.parent_run_id}; browse with `mooring ui`", file=out)


def saved_line(result: SweepResult) -> str:
    """Where the study's report and tables are: its directory (the report first), or the parent run's artifacts."""
    names = sorted((Path(p).name for p in result.outputs), key=lambda name: name != "report.html")
    if not names:
        return ""
    if result.out_dir is None:
        return f"saved {', '.join(names)} as artifacts of MLflow parent run {result.parent_run_id}"
    return f"saved {result.out_dir}/{names[0]}" + "".join(f", {name}" for name in names[1:])
