"""What a trial scores, in the study's direction: the value the pruner sees after each round and the value the
study is told at the end. `time_to_target` is the simulated seconds until the global accuracy first reached
participation.target_accuracy; a trial that never reaches it is pruned (docs/participation.md, "Time to target
as a sweep objective").

Every trial is scored on its validation split (data.validation_fraction, held out of the clients' training
samples; a sweep turns it on), never on the test sets, which its runs do not evaluate: the objective's
`accuracy` is the run's `val_accuracy`. The test sets are read once, for the best trial (pipelines/best_on_test.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.experiment.config import ConfigError, ExperimentConfig, with_overrides
from orchestrator.server.evaluation import validation_key
from pipelines.sweep_config import TIME_TO_TARGET, Direction, ObjectiveConfig

# data.validation_fraction of a sweep whose base experiment holds out none
SWEEP_VALIDATION_FRACTION = 0.2


@dataclass(frozen=True)
class Score:
    """A finished run's objective: a value for a complete trial, or why it has none."""

    state: str  # as TrialOutcome's: complete | pruned | failed
    value: float | None = None
    reason: str = ""


def study_direction(objective: ObjectiveConfig):
    from optuna.study import StudyDirection

    return StudyDirection.MINIMIZE if objective.direction is Direction.MINIMIZE else StudyDirection.MAXIMIZE


def check_objective(objective: ObjectiveConfig, base: ExperimentConfig, source: str) -> None:
    """time_to_target needs a target accuracy, which also turns the simulated clock on; a figure of the global
    model judged client by client (worst10_accuracy, ...) needs eval.per_client."""
    from pipelines.comparison import needs_per_client

    if objective.metric == TIME_TO_TARGET and base.participation.target_accuracy is None:
        raise ConfigError(f"{source}: objective.metric = time_to_target needs participation.target_accuracy in the "
                          "base experiment or the sweep's overrides")
    if needs_per_client(objective.metric) and not base.eval.per_client.enabled:
        raise ConfigError(f"{source}: objective.metric = {objective.metric} needs eval.per_client.enabled: true in "
                          "the base experiment or the sweep's overrides (docs/fairness.md)")


def on_validation_split(base: ExperimentConfig) -> ExperimentConfig:
    """A sweep's base experiment: with a validation split (SWEEP_VALIDATION_FRACTION unless the base holds one
    out already) and evaluated on the test sets, as the best trial's config runs; trials switch to the split."""
    fraction = base.data.validation_fraction or SWEEP_VALIDATION_FRACTION
    return with_overrides(base, {"data.validation_fraction": fraction, "eval.split": "test"})


def metric_key(metric: str, split: str) -> str:
    """The name of an objective metric in the history of a run evaluated on `split` (eval.split)."""
    return validation_key(metric) if split == "validation" else metric


def round_value(objective: ObjectiveConfig, history: list[dict[str, Any]], target: float | None,
                split: str = "validation") -> float | None:
    """What the pruner sees after the last round of `history`. For time_to_target: the time the target was
    reached, or else the clock now, a lower bound of the time it will be reached."""
    from orchestrator.reporting.results import headline
    from orchestrator.server.participation import time_to_accuracy

    if objective.metric != TIME_TO_TARGET:
        return headline(history[-1], metric_key(objective.metric, split))
    clock = history[-1].get("simulated_seconds")
    if clock is None or target is None:
        return None
    reached = time_to_accuracy(history, target, metric_key("accuracy", split))
    return float(clock) if reached is None else reached


def final_score(objective: ObjectiveConfig, history: list[dict[str, Any]], target: float | None,
                split: str = "validation") -> Score:
    """The value the study is told for a run that finished (evaluated on `split`)."""
    from pipelines.comparison import aggregate_metric

    if objective.metric != TIME_TO_TARGET:
        value = aggregate_metric(history, f"{metric_key(objective.metric, split)}:{objective.aggregate}")
        if value is None:
            keys = ", ".join(sorted({k for m in history for k in m}))
            return Score("failed", reason=f"objective metric {metric_key(objective.metric, split)!r} is not in the "
                                          f"run's metrics ({keys})")
        return Score("complete", value)
    return time_to_target_score(history, target, metric_key("accuracy", split))


def time_to_target_score(history: list[dict[str, Any]], target: float | None, accuracy_key: str) -> Score:
    """Simulated seconds until `accuracy_key` first reached the target; pruned where it never did."""
    from orchestrator.reporting.results import last_logged
    from orchestrator.server.participation import time_to_accuracy

    if target is None:
        return Score("failed", reason="time_to_target: the trial has no participation.target_accuracy")
    clock = last_logged(history, "simulated_seconds")
    if clock is None:
        return Score("failed", reason="time_to_target: the run logged no simulated clock")
    reached = time_to_accuracy(history, target, accuracy_key)
    if reached is None:
        accuracies = [m[accuracy_key] for m in history if m.get(accuracy_key) is not None]
        best = max(accuracies) if accuracies else None
        return Score("pruned", reason=f"never reached {accuracy_key} {target:g} in {clock:.0f} simulated s "
                                      f"(best {'n/a' if best is None else f'{best:.4f}'})")
    return Score("complete", reached)


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"


def shown(value: float | None, spec: str) -> str:
    """An objective value as the sweep prints it: simulated seconds for time_to_target, else a percentage."""
    if value is not None and spec == TIME_TO_TARGET:
        return f"{value:.0f} simulated s"
    return pct(value)
