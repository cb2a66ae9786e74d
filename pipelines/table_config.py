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


class Column(Strict):
    """One column of a paper's table: the setting and metric that reproduce it, or why none can."""

    name: str
    setting: str | None = Field(None, description="the named setting (of the budget) that reproduces the column")
    metric: str | None = Field(None, description="KEY:AGG (pipelines/comparison.py aggregate_metric); default: the file's")
    spread_metric: str | None = Field(None, description="KEY:AGG of the ± the paper prints when it is not the std over "
                                      "seeds (FedNH's across-client std); its mean over seeds is shown")
    rank_by: Literal["value", "spread"] = Field("value", description="what Kendall's τ orders the rows by")
    not_expressible: str | None = Field(None, description="why the protocol cannot reproduce the column")

    @model_validator(mode="after")
    def setting_or_reason(self) -> Column:
        if (self.setting is None) == (self.not_expressible is None):
            raise ValueError(f"column {self.name!r}: give either `setting` or `not_expressible` (why not), not both")
        if self.rank_by == "spread" and self.spread_metric is None:
            raise ValueError(f"column {self.name!r}: rank_by spread needs a spread_metric")
        return self


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


class Budget(Strict):
    """Another budget of the same tables: overrides on the experiment, seeds, its own settings, and which of its
    settings stands for each column (a column it does not name is not expressible at this budget)."""

    description: str
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted keys set on every run")
    seeds: list[int] | None = None
    settings: dict[str, dict[str, Any]] = Field(default_factory=dict)
    columns: dict[str, str] = Field(default_factory=dict, description="'<table id>/<column name>' → setting")
    tuned: bool = Field(False, description="run the rows with their tuned values (`--tune` chose them on the digits "
                        "budget's validation splits): true for a shorter digits budget, false for the paper's own "
                        "protocol")
    notes: str = ""


class Tuning(Strict):
    """How `mooring table --tune` tunes the rows (pipelines/table_tuning.py): in one setting, at a budget of its
    own, on a validation split held out of the clients' training samples."""

    setting: str = Field(description="the setting every row is tuned in")
    trials: int = Field(12, ge=1, le=200, description="Optuna trials per row (TPE; the row's own values first)")
    seed: int = Field(0, description="the trials' seed, and the sampler's")
    validation_fraction: float = Field(0.2, gt=0, lt=1, description="share of each client's training samples "
                                       "held out to score the trials")
    metric: str | None = Field(None, description="KEY:AGG maximised on the validation split; default: the file's")
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted keys for the trials only (a "
                                      "shorter budget: train.rounds)")


class TunedRow(Strict):
    """What `--tune` chose for one row, as the tuned-values file records it."""

    params: dict[str, Any]
    searched: dict[str, str] = Field(description="hyperparameter → the range searched")
    metric: str = Field(description="KEY:AGG the trials were scored by, on the validation split")
    trials: int
    best_validation: float
    study: str
    date: str


class TunedValues(Strict):
    """The tuned-values file (`configs/tables/<paper>.tuned.yaml`): the tuning it came from, the command line's
    --set the trials ran with, and every row's choice."""

    tuning: dict[str, Any]
    set: list[str] = Field(default_factory=list, description="the --set the trials ran with (they win over the "
                           "tuning's overrides)")
    rows: dict[str, TunedRow] = Field(default_factory=dict)


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
    notes: str = ""
    _tuned_rows: dict[str, TunedRow] = PrivateAttr(default_factory=dict)
    _tuned_set: list[str] = PrivateAttr(default_factory=list)
    _tuning_drift: dict[str, str] = PrivateAttr(default_factory=dict)
    _tuned_path: str = PrivateAttr("")

    @property
    def tuned_rows(self) -> dict[str, TunedRow]:
        """The rows `--tune` chose values for (read from the tuned-values file by load_table_file)."""
        return self._tuned_rows

    @property
    def tuned_set(self) -> list[str]:
        """The --set the tuned rows' trials ran with (none: the tuning as the file gives it)."""
        return self._tuned_set

    @property
    def tuning_drift(self) -> dict[str, str]:
        """Where the tuning recorded in the tuned-values file differs from this file's `tuning:` (empty: it does
        not): setting → what differs."""
        return self._tuning_drift

    def check_tuned_values_current(self) -> None:
        """Tuned values are used only where they came from this file's tuning: one line otherwise."""
        if self._tuning_drift and self._tuned_rows:
            raise ConfigError(f"{self._tuned_path}: {'; '.join(self._tuning_drift.values())}: its values were not "
                              "tuned the way this table tunes; run `mooring table --tune` again (or restore the "
                              "table's tuning)")

    def tuning_metric(self, row_id: str | None = None) -> str:
        """KEY:AGG a row is tuned by: its own `tune_metric`, else the tuning's `metric`, else the file's."""
        own = self.rows[row_id].tune_metric if row_id is not None else None
        return own or (self.tuning.metric if self.tuning and self.tuning.metric else None) or self.metric

    @model_validator(mode="after")
    def tuning_setting_exists(self) -> TableFile:
        if self.tuning is not None and self.tuning.setting not in self.settings:
            raise ValueError(f"tuning.setting: unknown setting {self.tuning.setting!r}; allowed: "
                             f"{', '.join(self.settings)}")
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


def load_table_file(path: str) -> TableFile:
    """The table file, validated: one line (ConfigError) naming the file and the problem otherwise. The
    experiment is validated too, as every run's config will be, and the tuned values are read where they exist."""
    raw = read_yaml(path)
    try:
        spec = TableFile(**raw)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, path, TableFile)) from None
    build_config(dict(spec.experiment), f"{path}: experiment")
    tuned = tuned_values_path(spec, path)
    if tuned.is_file():
        values = read_tuned_values(tuned, spec)
        spec._tuned_rows, spec._tuned_set, spec._tuned_path = values.rows, values.set, str(tuned)
        spec._tuning_drift = tuning_drift(values.tuning, spec.tuning)
    return spec


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


def tuned_values_path(spec: TableFile, source: str) -> Path:
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
              "validation split\n# (pipelines/table_tuning.py); read by every run of the table's digits budget. "
              "Written by the tool: run --tune again rather than editing.\n")
    record = values.model_dump()
    if not record["set"]:
        del record["set"]
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
    """What a budget runs: the experiment (as a raw mapping), seeds, settings, every column's plan, and the rows'
    tuned values (the digits budget's only: the values were chosen on its validation splits)."""

    name: str
    experiment: dict[str, Any]
    seeds: list[int]
    settings: dict[str, dict[str, Any]]
    columns: list[ColumnPlan]
    description: str
    notes: str
    tuned: dict[str, TunedRow] = field(default_factory=dict)


@dataclass(frozen=True)
class SettingRun:
    """One compare: a setting's base config and its variants (row id → overrides)."""

    setting: str
    base: Any  # ExperimentConfig
    variants: dict[str, dict[str, Any]]


def resolve_budget(spec: TableFile, name: str, source: str, check_tuned: bool = True) -> BudgetPlan:
    """The budget `name` of the table; where it runs the tuned values, they must come from the table's own
    tuning (check_tuned False: `--tune`, which tunes them again)."""
    if check_tuned and (name == DEFAULT_BUDGET or (name in spec.budgets and spec.budgets[name].tuned)):
        spec.check_tuned_values_current()
    if name == DEFAULT_BUDGET:
        return BudgetPlan(name, copy.deepcopy(spec.experiment), spec.seeds, spec.settings, own_columns(spec),
                          "the spec's small-scale digits protocol", spec.notes, dict(spec.tuned_rows))
    if name not in spec.budgets:
        allowed = ", ".join([DEFAULT_BUDGET, *spec.budgets])
        raise ConfigError(f"{source}: --budget {name!r}: not a budget of this file; allowed: {allowed}")
    budget = spec.budgets[name]
    experiment = copy.deepcopy(spec.experiment)
    for key, value in budget.overrides.items():
        set_dotted(experiment, key, value)
    columns = [ColumnPlan(t, c, i, budget.columns.get(f"{t.id}/{c.name}"),
                          None if f"{t.id}/{c.name}" in budget.columns else f"not in budgets.{name}.columns: "
                          + (c.not_expressible or "the paper's protocol has no such condition here"),
                          c.metric or spec.metric)
               for t in spec.tables for i, c in enumerate(t.columns)]
    return BudgetPlan(name, experiment, budget.seeds or spec.seeds, budget.settings, columns, budget.description,
                      budget.notes, dict(spec.tuned_rows) if budget.tuned else {})


def own_columns(spec: TableFile) -> list[ColumnPlan]:
    return [ColumnPlan(t, c, i, c.setting, c.not_expressible, c.metric or spec.metric)
            for t in spec.tables for i, c in enumerate(t.columns)]

