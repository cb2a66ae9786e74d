"""The sweep file: a base experiment, the parameters to search, the objective, the sampler and the pruner.

    base: ../default.yaml                  # relative to this file
    overrides: {train.rounds: 10}          # dotted keys applied to the base
    algorithm: fedfa                       # optional: search fedfa's default ranges (its search_space())
    params:                                # keyed by dotted config paths
      algorithm.fedfa.mu: {type: float, low: 0.01, high: 10, log: true}
      data.partition.alpha: {type: categorical, choices: [0.05, 0.1, 0.5]}
    objective: {metric: accuracy, aggregate: final}      # maximised; max_epsilon: 8 prunes trials over ε = 8
    # measured on the trials' validation split (val_accuracy; pipelines/sweep_objective.py), never the test sets
    # direction: maximize (default) | minimize; or {metric: time_to_target, direction: minimize}: simulated seconds
    n_trials: 20
    max_failures: 10                       # failed trials after which the sweep stops (default: n_trials, at most 10)
    sampler: {name: tpe, seed: 0}          # tpe | random | grid (at most MAX_GRID_POINTS points)
    pruner: {name: median, n_startup_trials: 5}         # median | successive_halving | none

Every block forbids unknown keys; a problem is one line (ConfigError), as for experiment configs.
"""
from __future__ import annotations

import math
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from orchestrator.experiment.config import ConfigError, Strict, format_validation_error, read_yaml

# ------------------------------------------------------------------------------------ distributions
Choice = str | int | float | bool | None


class _Range(Strict):
    """low..high, optionally log-scaled; `grid` lists the values the grid sampler tries (default: evenly
    spaced points, log-spaced where log)."""

    max_int: ClassVar[int | None] = None  # a grid over 10³⁰ integers is counted, never listed (grid_count)
    low: float
    high: float
    log: bool = False
    grid: list[float] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def bounds_make_sense(self):
        if not self.low < self.high:
            raise ValueError(f"low = {self.low} must be below high = {self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"log scale needs low > 0, got low = {self.low}")
        outside = [v for v in self.grid or [] if not self.low <= v <= self.high]
        if outside:
            raise ValueError(f"grid values {outside} lie outside [{self.low}, {self.high}]")
        return self


class FloatParam(_Range):
    type: Literal["float"]
    step: float | None = Field(None, gt=0)

    def grid_count(self, points: int) -> int:
        """How many values grid_values(points) gives, without making them."""
        if self.grid is not None:
            return len(self.grid)
        if self.step is not None:
            return max(0, math.ceil((self.high + self.step / 2 - self.low) / self.step))
        return points

    def grid_values(self, points: int) -> list[float]:
        if self.grid is not None:
            return list(self.grid)
        if self.step is not None:
            return [float(v) for v in np.arange(self.low, self.high + self.step / 2, self.step)]
        spaced = np.geomspace if self.log else np.linspace
        return [float(f"{v:.6g}") for v in spaced(self.low, self.high, points)]

    def distribution(self):
        from optuna.distributions import FloatDistribution

        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)


class IntParam(_Range):
    type: Literal["int"]
    low: int
    high: int
    step: int = Field(1, ge=1)
    grid: list[int] | None = Field(None, min_length=1)

    def grid_count(self, points: int) -> int:
        return len(self.grid) if self.grid is not None else (self.high - self.low) // self.step + 1  # low < high

    def grid_values(self, points: int) -> list[int]:
        if self.grid is not None:
            return list(self.grid)
        return list(range(self.low, self.high + 1, self.step))

    def distribution(self):
        from optuna.distributions import IntDistribution

        return IntDistribution(self.low, self.high, log=self.log, step=self.step)


class CategoricalParam(Strict):
    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1)

    @model_validator(mode="after")
    def distinct(self):
        if len({repr(c) for c in self.choices}) != len(self.choices):
            raise ValueError(f"choices {self.choices} repeat a value")
        return self

    def grid_count(self, points: int) -> int:
        return len(self.choices)

    def grid_values(self, points: int) -> list[Choice]:
        return list(self.choices)

    def distribution(self):
        from optuna.distributions import CategoricalDistribution

        return CategoricalDistribution(self.choices)


Param = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


def param_from_search_space(spec: dict[str, Any]) -> FloatParam | IntParam | CategoricalParam:
    """An algorithm's `HyperParams.search_space()` entry as a sweep parameter."""
    if spec["type"] == "categorical":
        return CategoricalParam(type="categorical", choices=spec["choices"])
    cls = IntParam if spec["type"] == "int" else FloatParam
    return cls(type=spec["type"], low=spec["low"], high=spec["high"], log=bool(spec.get("log")))


# ------------------------------------------------------------------------------------- the blocks
class Direction(str, Enum):
    """Which way a sweep optimises its objective: Optuna's study direction, which its pruner follows too."""

    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


TIME_TO_TARGET = "time_to_target"  # the objective metric that is a run's simulated seconds to its target accuracy


class ObjectiveConfig(Strict):
    """What a trial is worth: KEY of each round's metrics, reduced by AGG over the rounds, in `direction`; or
    `time_to_target`, the simulated seconds to participation.target_accuracy, minimised (pipelines/sweep_objective.py).
    The pruner sees KEY (for time_to_target, a lower bound of it) after every round."""

    metric: str = Field("accuracy", description="accuracy, personalized_accuracy, accuracy_worst, time_to_target, "
                        "worst10_accuracy, client_accuracy_std (with eval.per_client: docs/fairness.md), "
                        "personalized_worst10_accuracy, ...; "
                        "an accuracy is the trial's on its validation split (val_accuracy, ...)")
    aggregate: Literal["final", "best", "last5", "top5"] = "final"
    direction: Direction = Direction.MAXIMIZE
    max_epsilon: float | None = Field(None, gt=0, description="privacy budget: a trial is pruned the round its ε "
                                      "(epsilon_metric, for privacy.delta) exceeds it, and one that logs no ε is too")
    epsilon_metric: Literal["dp_epsilon", "dp_epsilon_stats"] = Field(
        "dp_epsilon", description="the ε the budget bounds: model updates', or the class statistics'")

    @model_validator(mode="after")
    def direction_fits(self):
        if self.metric == TIME_TO_TARGET:
            if self.direction is not Direction.MINIMIZE:
                raise ValueError("time_to_target is simulated seconds, to be minimised: set direction: minimize")
            if "aggregate" in self.model_fields_set:
                raise ValueError("time_to_target is one figure per run: remove aggregate")
            if self.max_epsilon is not None:
                raise ValueError("time_to_target runs the participation block, which a privacy block (hence "
                                 "max_epsilon) cannot go with: remove max_epsilon")
        elif self.direction is Direction.MINIMIZE and self.aggregate in ("best", "top5"):
            raise ValueError(f"aggregate {self.aggregate} takes the highest rounds; to minimise use final or last5")
        return self

    @property
    def spec(self) -> str:
        return TIME_TO_TARGET if self.metric == TIME_TO_TARGET else f"{self.metric}:{self.aggregate}"


class TPESampler(Strict):
    name: Literal["tpe"]
    seed: int = 0
    n_startup_trials: int = Field(10, ge=0, description="random trials before TPE models the results")
    multivariate: bool = True


class RandomSampler(Strict):
    name: Literal["random"]
    seed: int = 0


class GridSampler(Strict):
    name: Literal["grid"]
    seed: int = 0
    points: int = Field(4, ge=2, description="grid points of a float range that lists no `grid:` values")


class MedianPruner(Strict):
    """Stop a trial whose accuracy at round t is below the median of the completed trials' at round t."""

    name: Literal["median"]
    n_startup_trials: int = Field(5, ge=0, description="completed trials before any pruning")
    n_warmup_steps: int = Field(1, ge=0, description="first rounds of every trial, never pruned")
    interval_steps: int = Field(1, ge=1)


class SuccessiveHalvingPruner(Strict):
    name: Literal["successive_halving"]
    min_resource: int = Field(1, ge=1, description="rounds before the first rung")
    reduction_factor: int = Field(3, ge=2)
    min_early_stopping_rate: int = Field(0, ge=0)


class NoPruner(Strict):
    name: Literal["none"]


SamplerConfig = Annotated[TPESampler | RandomSampler | GridSampler, Field(discriminator="name")]
PrunerConfig = Annotated[MedianPruner | SuccessiveHalvingPruner | NoPruner, Field(discriminator="name")]

DEFAULT_STORAGE = "sqlite:///optuna.db"
# A grid larger than this is refused before it is made: Optuna's grid sampler lists every point in memory, and a
# sweep of more federated runs than this is not one anybody waits for (use tpe or random).
MAX_GRID_POINTS = 10_000
# Failed trials that stop a sweep unless max_failures says otherwise: n_trials, and never more than this.
DEFAULT_MAX_FAILURES = 10


class SweepConfig(Strict):
    base: str = Field("../default.yaml", description="the experiment to vary, relative to the sweep file")
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted keys applied to the base")
    algorithm: str | None = Field(None, description="run this algorithm and search its default ranges")
    params: dict[str, Param] = Field(default_factory=dict, description="dotted config path → distribution")
    enqueue: list[dict[str, Any]] = Field(default_factory=list, description="parameter sets tried first")
    objective: ObjectiveConfig = Field(default_factory=ObjectiveConfig)
    n_trials: int | None = Field(None, ge=1, description="complete + pruned trials; default 20, or the grid's size")
    max_failures: int | None = Field(None, ge=1, description="failed trials after which the sweep stops with exit 1; "
                                     f"default n_trials, at most {DEFAULT_MAX_FAILURES}")
    sampler: SamplerConfig = Field(default_factory=lambda: TPESampler(name="tpe"),
                                   description="how each trial's parameters are drawn; default tpe")
    pruner: PrunerConfig = Field(default_factory=lambda: MedianPruner(name="median"),
                                 description="when a trial is stopped before its last round; default median")
    parallel: int | None = Field(None, ge=1, description="trials at once; default: as the cluster's CPUs hold")
    test_best: bool = Field(True, description="run the best trial's config once on the test sets when the trials are "
                            "done; off where the tuned values' own runs measure the test sets (a table's tuning)")
    study: str | None = Field(None, description="default: the sweep file's name")
    storage: str | None = Field(None, description=f"Optuna RDB URL; default {DEFAULT_STORAGE} in the working directory")


def read_sweep_config(path: str | Path) -> SweepConfig:
    raw = read_yaml(path)
    try:
        return SweepConfig(**raw)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, str(path), SweepConfig)) from None


def grid_size(space: dict[str, Any], points: int) -> int:
    """The grid's number of points, counted without making it (a range of 10⁶ integers is counted, not listed)."""
    return math.prod(p.grid_count(points) for p in space.values())
