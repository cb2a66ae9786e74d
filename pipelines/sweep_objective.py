"""What a trial scores, in the study's direction: the value the pruner sees after each round and the value the
study is told at the end. `time_to_target` is the simulated seconds until the global accuracy first reached
participation.target_accuracy; a trial that never reaches it is pruned (docs/participation.md, "Time to target
as a sweep objective")."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.config import ConfigError, ExperimentConfig
from pipelines.sweep_config import TIME_TO_TARGET, Direction, ObjectiveConfig


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
    """time_to_target needs a target accuracy, which also turns the simulated clock on."""
    if objective.metric == TIME_TO_TARGET and base.participation.target_accuracy is None:
        raise ConfigError(f"{source}: objective.metric = time_to_target needs participation.target_accuracy in the "
                          "base experiment or the sweep's overrides")


def round_value(objective: ObjectiveConfig, history: list[dict[str, Any]], target: float | None) -> float | None:
    """What the pruner sees after the last round of `history`. For time_to_target: the time the target was
    reached, or else the clock now, a lower bound of the time it will be reached."""
    from orchestrator.participation import time_to_accuracy
    from orchestrator.results import headline

    if objective.metric != TIME_TO_TARGET:
        return headline(history[-1], objective.metric)
    clock = history[-1].get("simulated_seconds")
    if clock is None or target is None:
        return None
    reached = time_to_accuracy(history, target)
    return float(clock) if reached is None else reached


def final_score(objective: ObjectiveConfig, history: list[dict[str, Any]], target: float | None) -> Score:
    """The value the study is told for a run that finished."""
    from orchestrator.results import summary_metrics
    from pipelines.compare import aggregate_metric

    if objective.metric != TIME_TO_TARGET:
        value = aggregate_metric(history, objective.spec)
        if value is None:
            keys = ", ".join(sorted({k for m in history for k in m}))
            return Score("failed", reason=f"objective metric {objective.metric!r} is not in the run's metrics ({keys})")
        return Score("complete", value)
    if target is None:
        return Score("failed", reason="time_to_target: the trial has no participation.target_accuracy")
    summary = summary_metrics(history, target)
    if "simulated_seconds" not in summary:
        return Score("failed", reason="time_to_target: the run logged no simulated clock")
    if summary["time_to_target"] is None:
        best = summary["best_global_accuracy"]
        return Score("pruned", reason=f"never reached accuracy {target:g} in {summary['simulated_seconds']:.0f} "
                                      f"simulated s (best {'n/a' if best is None else f'{best:.4f}'})")
    return Score("complete", summary["time_to_target"])


def shown(value: float | None, spec: str) -> str:
    """An objective value as the sweep prints it: simulated seconds for time_to_target, else a percentage."""
    from pipelines.sweep_driver import pct

    if value is not None and spec == TIME_TO_TARGET:
        return f"{value:.0f} simulated s"
    return pct(value)
