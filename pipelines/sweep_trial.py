"""One trial: a federated run as a Ray task, reporting every round to Optuna and pruned when it falls behind."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from orchestrator.experiment.config import (
    ExperimentConfig,
    with_overrides,
)
from orchestrator.io import storage
from pipelines.sweep_file import Sweep, trial_name
from pipelines.sweep_objective import final_score, round_value
from pipelines.sweep_optuna import build_pruner, open_storage, quiet_optuna
from pipelines.trial_store import TrialReporter, TrialStore


@dataclass
class TrialJob:
    number: int
    cfg: ExperimentConfig
    study_name: str
    storage_url: str
    pruner: Any
    objective: Any  # ObjectiveConfig
    parent_run_id: str | None


@dataclass
class TrialOutcome:
    state: str  # complete | pruned | failed
    value: float | None = None
    reason: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    mlflow_run_id: str | None = None
    wall_seconds: float = 0.0

    @property
    def rounds(self) -> int:
        return len(self.history)

    @property
    def client_rounds(self) -> int:
        """Σ over the rounds run of the clients trained: what the trial cost."""
        return sum(int(m.get("clients", 0)) for m in self.history)


class Diverged(Exception):
    pass


def check_finite_losses(metrics: dict[str, Any]) -> None:
    for key, value in metrics.items():
        if "loss" in key and isinstance(value, float) and not math.isfinite(value):
            raise Diverged(f"diverged: {key} = {value} at round {metrics.get('round')}")


class OverBudget(Exception):
    """A trial's ε passed the sweep's privacy budget (objective.max_epsilon), or it logs none to bound."""


def check_budget(metrics: dict[str, Any], objective: Any, last_round: int) -> None:
    """Raise OverBudget once the round's ε exceeds objective.max_epsilon (ε only grows with the rounds), or at
    the last round of a run that logged no ε (no noise: no bound holds)."""
    if objective.max_epsilon is None:
        return
    key, bound = objective.epsilon_metric, objective.max_epsilon
    epsilon = metrics.get(key)
    if epsilon is not None and epsilon > bound:
        raise OverBudget(f"pruned after round {metrics.get('round')}: {key} = {epsilon:.3g} exceeds max_epsilon = {bound:g}")
    if epsilon is None and metrics.get("round") == last_round:
        raise OverBudget(f"pruned: the run logs no {key} (no privacy noise), so max_epsilon = {bound:g} cannot hold")


def run_trial(job: TrialJob) -> TrialOutcome:
    """The Ray task of one trial: the run, reporting the objective's metric to Optuna after every round."""
    import optuna

    from orchestrator.driver.run import run_experiment

    quiet_optuna()
    t0 = time.perf_counter()
    storage_obj = open_storage(job.storage_url)
    study = optuna.load_study(study_name=job.study_name, storage=storage_obj,
                              sampler=optuna.samplers.RandomSampler(), pruner=build_pruner(job.pruner))
    trial = TrialReporter(study, TrialStore(storage_obj, job.study_name), job.number)
    metric = job.objective.metric
    target = job.cfg.participation.target_accuracy
    history: list[dict[str, Any]] = []

    def on_round(metrics: dict[str, Any]) -> None:
        history.append(metrics)
        check_finite_losses(metrics)
        check_budget(metrics, job.objective, job.cfg.train.rounds)
        value = round_value(job.objective, history, target)
        if value is None:
            return
        trial.report(value, step=int(metrics["round"]))
        if trial.should_prune():
            raise optuna.TrialPruned(f"pruned after round {metrics['round']}: {metric} = {value:.4f}")

    def outcome(state: str, **kw) -> TrialOutcome:
        return TrialOutcome(state, history=history, mlflow_run_id=trial_run_id(job.cfg),
                            wall_seconds=time.perf_counter() - t0, **kw)

    try:
        result = run_experiment(job.cfg, progress=False, parent_run_id=job.parent_run_id, on_round=on_round)
    except optuna.TrialPruned as e:
        return outcome("pruned", reason=str(e))
    except (Diverged, OverBudget) as e:
        return outcome("pruned", reason=str(e))
    except Exception as e:  # whatever a trial raises fails that trial only; the sweep goes on
        return outcome("failed", reason=one_line(e))
    score = final_score(job.objective, result.history, target)
    return outcome(score.state, value=score.value, reason=score.reason)


def one_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300]}" if text else type(e).__name__


def trial_run_id(cfg: ExperimentConfig) -> str | None:
    """The MLflow run of a trial, from run.json in the trial's only run directory (there even if it raised)."""
    from orchestrator.driver.run_dir import RunLog

    for name in storage.list_dir(cfg.checkpoint.dir):
        run_id = RunLog(storage.join(cfg.checkpoint.dir, name)).read_json("run.json").get("mlflow_run_id")
        if run_id:
            return run_id
    return None


def trial_config(sweep: Sweep, base_abs: ExperimentConfig, params: dict[str, Any], number: int) -> ExperimentConfig:
    """The base with the trial's parameters; one client actor per trial, its own run directory, evaluated on the
    validation split only (pipelines/sweep_objective.py). A non-finite loss does not stop the run: the sweep
    prunes the trial as diverged (check_finite_losses), with its reason."""
    return with_overrides(base_abs, {
        **params, "name": trial_name(sweep.study_name, number), "resources.num_actors": 1, "eval.split": "validation",
        "train.on_nonfinite_loss": "continue",
        "checkpoint.dir": storage.join(sweep.sweep_dir, f"trial-{number:04d}"),
    })
