"""The schema of a paper's results tables (`configs/tables/<paper>.yaml`), run by `mooring table`.

A table file holds one paper's tables as the spec copies them, and how Mooring reproduces each cell:

- `experiment`: the small-scale protocol (an ordinary experiment config, orchestrator/experiment/config.py);
- `settings`: named overrides on it, one per distinct column condition (a Dirichlet α, a rotation, a model family);
  a key may hold `{algorithm}`, replaced by each row's method (`algorithm.{algorithm}.family: htfe`);
- `rows`: the paper's methods, each with the registered method that runs it (a method not registered yet is
  "not built" in the report, so the file is complete before every method lands), its hyperparameters and
  `tuned_by`, where those values come from;
- `tables`: each with its columns (a setting and a metric, or `not_expressible` with why) and `paper`, every row's
  numbers in column order exactly as the paper prints them ("66.69±0.69", "82.66(2.83)", "—");
- `budgets`: other budgets of the same tables, above all `paper`, the paper's own datasets, models, clients and
  rounds (its own settings, and which column each stands for).

Validation happens here (types, every row of a table known, one number per column, each number readable);
docs/tables/README.md describes the format for a reader.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from orchestrator.experiment.config import (
    ConfigError,
    Strict,
    build_config,
    format_validation_error,
    read_yaml,
    set_dotted,
)
from orchestrator.io import storage

DEFAULT_BUDGET = "digits"
REPORT_BUDGET = "mnist"  # the budget docs/tables/<paper>.md is made from
MIN_TRIALS = 20  # trials a row, at least, for a tuning a reviewer accepts (or the paper's own grid in full)
SETTING_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
ALGORITHM_SLOT = "{algorithm}"  # in a setting's key: each row's method
NO_NUMBER = ("", "—", "–", "-", "n/a")
# "66.69±0.69", "66.69 ± 0.69", "82.66(2.83)", "11,182", "828 (1.0X)", "22.90 ± 0.30 (†)"
NUMBER = re.compile(r"^\s*(?P<value>-?[\d,]*\.?\d+)\s*(?:±\s*(?P<pm>[\d.]+)|\((?P<paren>[\d.]+)\))?(?:\s+\(.*\))?\s*$")


@dataclass(frozen=True)
class PaperNumber:
    """One cell of the paper's table: its value, its ± (None where the paper gives none) and the text as printed."""

    value: float | None
    spread: float | None
    text: str


def paper_number(text: str | float | int) -> PaperNumber:
    """A cell as the paper prints it; ValueError where it is neither a number nor a dash."""
    text = str(text).strip()
    if text in NO_NUMBER:
        return PaperNumber(None, None, text)
    match = NUMBER.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a number as a paper prints one (66.69±0.69, 82.66(2.83), 11,182) or "
                         f"a dash ({', '.join(repr(d) for d in NO_NUMBER if d)})")
    spread = match["pm"] or match["paren"]
    return PaperNumber(float(match["value"].replace(",", "")), float(spread) if spread else None, text)


class Row(Strict):
    """One method of the paper's tables, and how Mooring runs it."""

    label: str = Field(description="the method's name as the paper prints it")
    method: str = Field(description="the registered Mooring method that runs the row (built or not yet)")
    params: dict[str, Any] = Field(default_factory=dict, description="its hyperparameter block "
                                   "(algorithm.<method>); unset ones take the method's paper defaults")
    overrides: dict[str, Any] = Field(default_factory=dict, description="other dotted overrides for this row only")
    per_setting: dict[str, dict[str, Any]] = Field(default_factory=dict, description="setting → dotted overrides for "
                                                   "this row in that setting only (a paper value per table)")
    tuned_by: str = Field(description="where the hyperparameters come from (the paper's values, defaults, ...); "
                          "a row tuned by `--tune` says so in the report instead")
    tune: bool | list[str] = Field(True, description="what `mooring table --tune` searches: every searchable "
                                   "hyperparameter of the method (true), those named, or none (false: the paper's "
                                   "own values are kept)")
    tune_metric: str | None = Field(None, description="KEY:AGG this row is tuned by, where the tuning's metric does "
                                    "not see its hyperparameters (Ditto's λ moves only its personalized accuracy)")
    tune_grid: dict[str, list[Any]] = Field(default_factory=dict, description="the paper's own grid (hyperparameter → "
                                            "values): `--tune` tries every combination, unpruned, instead of TPE")

    @field_validator("tune_grid")
    @classmethod
    def grid_values(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for name, values in grid.items():
            if not values:
                raise ValueError(f"tune_grid.{name}: give at least one value")
            if len({repr(v) for v in values}) != len(values):
                raise ValueError(f"tune_grid.{name}: {values} repeats a value")
        return grid


class Column(Strict):
    """One column of a paper's table: the setting and metric that reproduce it, or why none can."""

    name: str
    setting: str | None = Field(None, description="the named setting (of the budget) that reproduces the column")
    metric: str | None = Field(None, description="KEY:AGG (pipelines/comparison.py aggregate_metric); default: the file's")
    spread_metric: str | None = Field(None, description="KEY:AGG of the ± the paper prints when it is not the std over "
                                      "seeds (FedNH's across-client std); its mean over seeds is shown")
    rank_by: Literal["value", "spread"] = Field("value", description="what the column's intervals, tiers and "
                                                "Kendall's τ are computed on: the metric, or the spread_metric")
    rounds_to: float | None = Field(None, gt=0, description="the column is the rounds the metric's KEY takes to "
                                    "reach this value (0.5: 50 % accuracy), from each run's history, instead of "
                                    "the metric itself")
    better: Literal["higher", "lower"] | None = Field(None, description="which way a row is better, for its tier "
                                                      "and rank; default: lower for rounds_to and for rank_by "
                                                      "spread (a spread across clients: fairer), else higher")
    not_expressible: str | None = Field(None, description="why the protocol cannot reproduce the column")
    figure: str | None = Field(None, description="the paper gives this column only as a plot (which one): its "
                               "cells are dashes, and every row the table lists runs in it all the same")

    @model_validator(mode="after")
    def setting_or_reason(self) -> Column:
        if (self.setting is None) == (self.not_expressible is None):
            raise ValueError(f"column {self.name!r}: give either `setting` or `not_expressible` (why not), not both")
        if self.rank_by == "spread" and self.spread_metric is None:
            raise ValueError(f"column {self.name!r}: rank_by spread needs a spread_metric")
        if self.rounds_to is not None and self.rank_by == "spread":
            raise ValueError(f"column {self.name!r}: rounds_to counts rounds of the metric, not of its spread; drop "
                             "rank_by spread")
        return self

    @property
    def higher_is_better(self) -> bool:
        if self.better is not None:
            return self.better == "higher"
        return self.rounds_to is None and self.rank_by == "value"


class Table(Strict):
    """One of the paper's tables: its columns, and its numbers per row in column order."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    title: str
    columns: list[Column] = Field(min_length=1)
    paper: dict[str, list[str | float]] = Field(description="row id → the paper's cells in column order")
    notes: str = ""

    @field_validator("paper")
    @classmethod
    def readable_numbers(cls, paper: dict[str, list[str | float]]) -> dict[str, list[str | float]]:
        for row, cells in paper.items():
            for cell in cells:
                try:
                    paper_number(cell)
                except ValueError as e:
                    raise ValueError(f"row {row!r}: {e}") from None
        return paper

    @model_validator(mode="after")
    def one_cell_per_column(self) -> Table:
        names = [c.name for c in self.columns]
        repeated = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if repeated is not None:
            raise ValueError(f"table {self.id}: column {repeated!r} named twice; name each column once")
        for row, cells in self.paper.items():
            if len(cells) != len(self.columns):
                raise ValueError(f"table {self.id}: row {row!r} has {len(cells)} numbers for {len(self.columns)} "
                                 f"columns ({', '.join(c.name for c in self.columns)})")
        return self

    def numbers(self, row: str) -> list[PaperNumber]:
        return [paper_number(c) for c in self.paper[row]]


class Tuning(Strict):
    """How `mooring table --tune` tunes the rows (pipelines/table_tuning.py): in one setting, at a budget of its
    own, on a validation split held out of the clients' training samples."""

    setting: str = Field(description="the setting every row is tuned in")
    why: str = Field("", description="why that setting: the column's own, or the hardest of the table's (said in the "
                     "report)")
    trials: int = Field(MIN_TRIALS, ge=1, le=200, description="Optuna trials per row (TPE; the row's own values "
                        f"first); a report flags fewer than {MIN_TRIALS} (a row's `tune_grid` runs in full instead)")
    seed: int = Field(0, description="the trials' seed, and the sampler's")
    validation_fraction: float = Field(0.2, gt=0, lt=1, description="share of each client's training samples "
                                       "held out to score the trials")
    metric: str | None = Field(None, description="KEY:AGG maximised on the validation split; default: the file's")
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted keys for the trials only (a "
                                      "shorter budget: train.rounds)")
    widen: int = Field(2, ge=0, le=5, description="times a row is tuned again over a widened range when its choice "
                       "lies at a bound of its range; one still at a bound after that is flagged in the report")


class Timing(Strict):
    """The budget's measured cost: what `mooring table` estimates its time from before the first run."""

    round_seconds: dict[str, float] = Field(min_length=1, description="measured seconds a round of one run (one "
                                            "core), by '<setting>/<row>', setting, row or `default`, the first "
                                            "that names a run")
    start_seconds: float = Field(0.0, ge=0, description="a run's measured start-up and evaluation overhead, seconds")
    parallel: int = Field(2, ge=1, description="runs at once the estimate assumes (one a core)")
    measured: str = Field(description="when, where and how the figures were measured")

    @field_validator("round_seconds")
    @classmethod
    def positive(cls, seconds: dict[str, float]) -> dict[str, float]:
        bad = next((k for k, v in seconds.items() if not v > 0), None)
        if bad is not None:
            raise ValueError(f"round_seconds.{bad} = {seconds[bad]}: a measured time is above 0")
        return seconds

    def of(self, row_id: str, setting: str = "") -> float | None:
        for key in (f"{setting}/{row_id}", setting, row_id, "default"):
            if key in self.round_seconds:
                return self.round_seconds[key]
        return None


class Budget(Strict):
    """Another budget of the same tables: overrides on the experiment, seeds, its own settings, and which of its
    settings stands for each column (a column it does not name is not expressible at this budget)."""

    description: str
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted keys set on every run")
    seeds: list[int] | None = None
    settings: dict[str, dict[str, Any]] = Field(default_factory=dict)
    columns: dict[str, str] = Field(default_factory=dict, description="'<table id>/<column name>' → setting")
    rounds_to: dict[str, float] = Field(default_factory=dict, description="'<table id>/<column name>' → the target "
                                        "a rounds_to column counts to at this budget, where the column's own (the "
                                        "paper's threshold) is out of this budget's reach")
    tuned: bool = Field(False, description="run the rows with their tuned values (`--tune` chose them on the digits "
                        "budget's validation splits): true for a shorter digits budget, false for the paper's own "
                        "protocol")
    tuning: Tuning | None = Field(None, description="the budget's own tuning (`--tune --budget NAME`, on its own "
                                  "validation splits; values in <paper>.<budget>.tuned.yaml), used by its runs")
    timing: Timing | None = Field(None, description="measured seconds a round, for the estimate printed before the "
                                  "first run")
    notes: str = ""




class TunedRow(Strict):
    """What `--tune` chose for one row, as the tuned-values file records it."""

    params: dict[str, Any]
    searched: dict[str, str] = Field(description="hyperparameter → the range searched")
    metric: str = Field(description="KEY:AGG the trials were scored by, on the validation split")
    trials: int
    best_validation: float
    study: str
    date: str
    completed: int | None = Field(None, description="trials run to the end (every study of the row)")
    pruned: int | None = Field(None, description="trials the pruner stopped")
    start: dict[str, Any] | None = Field(None, description="the row's own values: the first trial")
    moved: bool | None = Field(None, description="whether the choice differs from `start`")
    widened: dict[str, str] = Field(default_factory=dict, description="hyperparameter → the range searched before "
                                    "its choice at a bound widened it")
    at_bound: dict[str, str] = Field(default_factory=dict, description="hyperparameter → the bound its choice still "
                                     "lies at (low or high) after the widenings: flagged in the report")
    grid: bool = Field(False, description="the paper's grid, tried in full")


class TunedValues(Strict):
    """The tuned-values file (`configs/tables/<paper>.tuned.yaml`): the tuning it came from, the command line's
    --set the trials ran with, and every row's choice."""

    tuning: dict[str, Any]
    set: list[str] = Field(default_factory=list, description="the --set the trials ran with (they win over the "
                           "tuning's overrides)")
    rows: dict[str, TunedRow] = Field(default_factory=dict)
    in_progress: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="row → the ranges it searched and the finished trials of each of its "
        "studies, for a row whose tuning a stop interrupted: the next --tune puts them back "
        "(pipelines/tuning_progress.py)")


class TableFile(Strict):
    paper: str = Field(pattern=r"^[a-z0-9_]+$", description="the paper's short name: docs/tables/<paper>.md")
    title: str
    source: str = Field(description="where the numbers and the protocol come from (docs/methods/<paper>.md §...)")
    metric: str = "accuracy:last5"
    seeds: list[int] = Field(min_length=1)
    experiment: dict[str, Any] = Field(description="the small-scale protocol, an experiment config")
    settings: dict[str, dict[str, Any]] = Field(min_length=1)
    rows: dict[str, Row] = Field(min_length=1)
    tables: list[Table] = Field(min_length=1)
    budgets: dict[str, Budget] = Field(default_factory=dict)
    tuning: Tuning | None = Field(None, description="how `--tune` tunes the rows")
    tuned: str | None = Field(None, description="the tuned-values file `--tune` writes and the digits budget reads, "
                              "relative to this file (default <paper>.tuned.yaml beside it)")
    own: list[str] = Field(default_factory=list, description="the rows of the paper's own method: their tier is "
                           "marked in every column, and the report's statements measure them")
    baseline: str | None = Field(None, description="the row the own method's lead is measured against (FedAvg)")
    reference: list[str] = Field(default_factory=list, description="rows printed for reference under another "
                                 "condition (FedFA's IID \"w/o skew\"): shown, but left out of the tiers, the "
                                 "pairs resolved, Kendall's τ and the statements")
    notes: str = Field("", description="why, in the author's words; every number, rank or order a report states "
                       "is computed from the results (pipelines/table_report.py), never written here")
    _tuned: dict[str, TunedState] = PrivateAttr(default_factory=dict)  # keyed by the budget that tuned them

    def tuned_state(self, budget: str = DEFAULT_BUDGET) -> TunedState:
        """What the tuned-values file of `budget`'s tuning holds (empty where there is none)."""
        return self._tuned.get(budget, TunedState())

    @property
    def tuned_rows(self) -> dict[str, TunedRow]:
        """The rows `--tune` chose values for on the digits budget (read from the tuned-values file by
        load_table_file)."""
        return self.tuned_state().rows

    @property
    def tuned_set(self) -> list[str]:
        """The --set the digits budget's tuned rows' trials ran with (none: the tuning as the file gives it)."""
        return self.tuned_state().set

    @property
    def tuning_drift(self) -> dict[str, str]:
        """Where the tuning recorded in the digits budget's tuned-values file differs from this file's `tuning:`
        (empty: it does not): setting → what differs."""
        return self.tuned_state().drift

    def check_tuned_values_current(self, budget: str = DEFAULT_BUDGET) -> None:
        """Tuned values are used only where they came from this file's tuning: one line otherwise."""
        state = self.tuned_state(budget)
        if state.drift and state.rows:
            option = "" if budget == DEFAULT_BUDGET else f" --budget {budget}"
            raise ConfigError(f"{state.path}: {'; '.join(state.drift.values())}: its values were not tuned the way "
                              f"this table tunes; run `mooring table{option} --tune` again (or restore the table's "
                              "tuning)")

    def tuning_of(self, budget: str) -> Tuning | None:
        """The tuning whose values a budget runs: its own, or the digits budget's (the digits budget, and a budget
        that says `tuned: true`), or none."""
        return self.tuning if self.tuned_by_budget(budget) == DEFAULT_BUDGET else \
            self.budgets[budget].tuning if self.tuned_by_budget(budget) else None

    def tuned_by_budget(self, budget: str) -> str | None:
        """The budget whose tuning chose the values `budget` runs with (None: it runs the rows' own values)."""
        if budget == DEFAULT_BUDGET:
            return DEFAULT_BUDGET
        if budget in self.budgets and self.budgets[budget].tuning is not None:
            return budget
        return DEFAULT_BUDGET if budget in self.budgets and self.budgets[budget].tuned else None

    def tuning_metric(self, row_id: str | None = None, tuning: Tuning | None = None) -> str:
        """KEY:AGG a row is tuned by: its own `tune_metric`, else the tuning's `metric` (default: the file's
        `tuning:`), else the file's."""
        tuning = tuning or self.tuning
        own = self.rows[row_id].tune_metric if row_id is not None else None
        return own or (tuning.metric if tuning and tuning.metric else None) or self.metric

    @model_validator(mode="after")
    def tuning_setting_exists(self) -> TableFile:
        if self.tuning is not None and self.tuning.setting not in self.settings:
            raise ValueError(f"tuning.setting: unknown setting {self.tuning.setting!r}; allowed: "
                             f"{', '.join(self.settings)}")
        for name, budget in self.budgets.items():
            if budget.tuning is not None and budget.tuning.setting not in budget.settings:
                raise ValueError(f"budgets.{name}.tuning.setting: unknown setting {budget.tuning.setting!r}; "
                                 f"allowed: {', '.join(budget.settings)}")
            if budget.tuning is not None and budget.tuned:
                raise ValueError(f"budgets.{name}: `tuned: true` runs the digits budget's tuned values, `tuning:` "
                                 "its own: give one")
            known = {"default", *self.rows, *budget.settings,
                     *(f"{s}/{r}" for s in budget.settings for r in self.rows)}
            unknown = [k for k in (budget.timing.round_seconds if budget.timing else {}) if k not in known]
            if unknown:
                raise ValueError(f"budgets.{name}.timing.round_seconds: {unknown[0]!r} names no run; name a row "
                                 f"({', '.join(self.rows)}), a setting of the budget, '<setting>/<row>' or `default`")
            if budget.timing and "default" not in budget.timing.round_seconds:
                raise ValueError(f"budgets.{name}.timing.round_seconds: give `default` for the runs not named")
        return self

    @model_validator(mode="after")
    def marked_rows_exist(self) -> TableFile:
        marked = [("own", r) for r in self.own] + [("reference", r) for r in self.reference]
        marked += [("baseline", self.baseline)] if self.baseline is not None else []
        for key, row in marked:
            if row not in self.rows:
                raise ValueError(f"{key}: {row!r} is not in `rows` ({', '.join(self.rows)})")
        both = [r for r in self.own if r in self.reference or r == self.baseline]
        if both:
            raise ValueError(f"own: {both[0]!r} is also the baseline or a reference row; a row is one of the three")
        if self.baseline is not None and self.baseline in self.reference:
            raise ValueError(f"baseline: {self.baseline!r} is a reference row, left out of the comparisons")
        return self

    @model_validator(mode="after")
    def names_resolve(self) -> TableFile:
        for setting in [*self.settings, *(s for b in self.budgets.values() for s in b.settings)]:
            if not SETTING_NAME.fullmatch(setting):
                raise ValueError(f"setting {setting!r}: a setting's name becomes part of its runs' names: letters, "
                                 "digits, '.', '_', '+' or '-'")
        for table in self.tables:
            unknown = [r for r in table.paper if r not in self.rows]
            if unknown:
                raise ValueError(f"table {table.id}: row {unknown[0]!r} is not in `rows` ({', '.join(self.rows)})")
            for column in table.columns:
                if column.setting is not None and column.setting not in self.settings:
                    raise ValueError(f"table {table.id}, column {column.name!r}: unknown setting "
                                     f"{column.setting!r}; allowed: {', '.join(self.settings)}")
        if DEFAULT_BUDGET in self.budgets:
            raise ValueError(f"budgets: {DEFAULT_BUDGET!r} is the file's own budget; name another")
        for name, budget in self.budgets.items():
            self.check_budget_columns(name, budget)
        every_setting = set(self.settings).union(*(b.settings for b in self.budgets.values()))
        for row_id, row in self.rows.items():
            unknown = [s for s in row.per_setting if s not in every_setting]
            if unknown:
                raise ValueError(f"rows.{row_id}.per_setting: unknown setting {unknown[0]!r}; allowed: "
                                 f"{', '.join(sorted(every_setting))}")
        return self

    def check_budget_columns(self, name: str, budget: Budget) -> None:
        known = {f"{t.id}/{c.name}" for t in self.tables for c in t.columns}
        for column, setting in budget.columns.items():
            if column not in known:
                raise ValueError(f"budgets.{name}.columns: {column!r} names no column; columns are "
                                 f"'<table id>/<column name>', e.g. {sorted(known)[0]!r}")
            if setting not in budget.settings:
                raise ValueError(f"budgets.{name}.columns[{column!r}]: unknown setting {setting!r}; allowed: "
                                 f"{', '.join(budget.settings)}")
        counted = {f"{t.id}/{c.name}" for t in self.tables for c in t.columns if c.rounds_to is not None}
        for column, target in budget.rounds_to.items():
            if column not in counted or column not in budget.columns:
                raise ValueError(f"budgets.{name}.rounds_to: {column!r} is not a rounds_to column this budget runs "
                                 f"(those it runs: {', '.join(sorted(counted & set(budget.columns))) or 'none'})")
            if not target > 0:
                raise ValueError(f"budgets.{name}.rounds_to[{column!r}] = {target}: a target above 0")


def load_table_file(path: str) -> TableFile:
    """The table file, validated: one line (ConfigError) naming the file and the problem otherwise. The
    experiment is validated too, as every run's config will be, and the tuned values are read where they exist
    (the digits budget's, and those of every budget with a tuning of its own)."""
    raw = read_yaml(path)
    try:
        spec = TableFile(**raw)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, path, TableFile)) from None
    build_config(dict(spec.experiment), f"{path}: experiment")
    tunings = {DEFAULT_BUDGET: spec.tuning} | {n: b.tuning for n, b in spec.budgets.items() if b.tuning is not None}
    for budget, tuning in tunings.items():
        tuned = tuned_values_path(spec, path, budget)
        if tuned.is_file():
            values = read_tuned_values(tuned, spec)
            spec._tuned[budget] = TunedState(values.rows, values.set, tuning_drift(values.tuning, tuning), str(tuned),
                                            values.in_progress)
    return spec


@dataclass
class TunedState:
    """One tuned-values file as read: the rows' choices, the --set their trials ran with, where the tuning it
    records differs from the table's (setting → what), and its path."""

    rows: dict[str, TunedRow] = field(default_factory=dict)
    set: list[str] = field(default_factory=list)
    drift: dict[str, str] = field(default_factory=dict)
    path: str = ""
    in_progress: dict[str, dict[str, Any]] = field(default_factory=dict)


def tuning_drift(recorded: dict[str, Any], tuning: Tuning | None) -> dict[str, str]:
    """Each setting of the tuning recorded in a tuned-values file that differs from the table's `tuning:`, with
    what differs (a setting the record leaves out counts at its default)."""
    if tuning is None:
        return {"tuning": "tuned under a `tuning:` block the table file no longer has"}
    try:
        then = Tuning(**recorded).model_dump()
    except (ValidationError, TypeError):
        return {"tuning": "its `tuning:` record is not one this version reads"}
    now = tuning.model_dump()
    return {key: f"tuning.{key} is {then[key]!r} there, {now[key]!r} in the table"
            for key in now if then[key] != now[key]}


def tuned_values_path(spec: TableFile, source: str, budget: str = DEFAULT_BUDGET) -> Path:
    """The digits budget's tuned values: <paper>.tuned.yaml (or the file's `tuned:`); another budget's tuning
    writes <paper>.<budget>.tuned.yaml, all beside the table file."""
    if budget != DEFAULT_BUDGET:
        return Path(source).parent / f"{spec.paper}.{budget}.tuned.yaml"
    return Path(source).parent / (spec.tuned or f"{spec.paper}.tuned.yaml")


def read_tuned_values(path: Path, spec: TableFile) -> TunedValues:
    try:
        values = TunedValues(**read_yaml(path))
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, str(path), TunedValues)) from None
    unknown = [r for r in values.rows if r not in spec.rows]
    if unknown:
        raise ConfigError(f"{path}: rows.{unknown[0]}: no such row in the table file ({', '.join(spec.rows)}); run "
                          "`mooring table --tune` again or remove it")
    return values


def write_tuned_values(path: Path, values: TunedValues, paper: str, source: str) -> None:
    """The tuned-values file, replaced whole (an interrupted write loses nothing: orchestrator/io/storage.py)."""
    header = (f"# {paper}: hyperparameters chosen by `mooring table {source} --tune`, one Optuna study per row on a "
              "validation split\n# (pipelines/table_tuning.py); read by every run of the budget it was tuned for. "
              "Written by the tool: run --tune again rather than editing.\n")
    record = values.model_dump()
    for empty in ("set", "in_progress"):
        if not record[empty]:
            del record[empty]
    text = header + yaml.safe_dump(record, sort_keys=False, allow_unicode=True)
    storage.write_bytes_atomic(str(path.absolute()), text.encode())


# ------------------------------------------------------------------------------------- budgets resolved
@dataclass(frozen=True)
class ColumnPlan:
    """A column at one budget: the setting that reproduces it (None: not expressible, with why)."""

    table: Table
    column: Column
    index: int
    setting: str | None
    reason: str | None
    metric: str


@dataclass(frozen=True)
class BudgetPlan:
    """What a budget runs: the experiment (as a raw mapping), seeds, settings, every column's plan, the rows'
    tuned values (those its own tuning chose, or the digits budget's where it runs them) with that tuning, and its
    measured timing."""

    name: str
    experiment: dict[str, Any]
    seeds: list[int]
    settings: dict[str, dict[str, Any]]
    columns: list[ColumnPlan]
    description: str
    notes: str
    tuned: dict[str, TunedRow] = field(default_factory=dict)
    tuning: Tuning | None = None
    timing: Timing | None = None


@dataclass(frozen=True)
class SettingRun:
    """One compare: a setting's base config and its variants (row id → overrides)."""

    setting: str
    base: Any  # ExperimentConfig
    variants: dict[str, dict[str, Any]]


def resolve_budget(spec: TableFile, name: str, source: str, check_tuned: bool = True) -> BudgetPlan:
    """The budget `name` of the table; where it runs tuned values, they must come from the table's own tuning
    (check_tuned False: `--tune`, which tunes them again)."""
    if name != DEFAULT_BUDGET and name not in spec.budgets:
        allowed = ", ".join([DEFAULT_BUDGET, *spec.budgets])
        raise ConfigError(f"{source}: --budget {name!r}: not a budget of this file; allowed: {allowed}")
    tuned_by = spec.tuned_by_budget(name)
    if check_tuned and tuned_by is not None:
        spec.check_tuned_values_current(tuned_by)
    tuned = dict(spec.tuned_state(tuned_by).rows) if tuned_by else {}
    tuning = spec.tuning_of(name)
    if name == DEFAULT_BUDGET:
        return BudgetPlan(name, copy.deepcopy(spec.experiment), spec.seeds, spec.settings, own_columns(spec),
                          "the spec's small-scale digits protocol", spec.notes, tuned, tuning)
    budget = spec.budgets[name]
    experiment = copy.deepcopy(spec.experiment)
    for key, value in budget.overrides.items():
        set_dotted(experiment, key, value)
    columns = [ColumnPlan(t, at_budget(c, budget.rounds_to.get(f"{t.id}/{c.name}")), i,
                          budget.columns.get(f"{t.id}/{c.name}"),
                          None if f"{t.id}/{c.name}" in budget.columns else f"not in budgets.{name}.columns: "
                          + (c.not_expressible or "not run at this budget"),
                          c.metric or spec.metric)
               for t in spec.tables for i, c in enumerate(t.columns)]
    return BudgetPlan(name, experiment, budget.seeds or spec.seeds, budget.settings, columns, budget.description,
                      budget.notes, tuned, tuning, budget.timing)


def at_budget(column: Column, rounds_to: float | None) -> Column:
    """The column as a budget runs it: its rounds_to target replaced by the budget's, where it gives one."""
    return column if rounds_to is None else column.model_copy(update={"rounds_to": rounds_to})


def own_columns(spec: TableFile) -> list[ColumnPlan]:
    return [ColumnPlan(t, c, i, c.setting, c.not_expressible, c.metric or spec.metric)
            for t in spec.tables for i, c in enumerate(t.columns)]

