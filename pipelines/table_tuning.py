"""`mooring table CONFIG --tune`: each row's hyperparameters tuned on a validation split, as the papers tuned their
baselines ("in a reasonable range", the best reported).

For every built row that `tune`s (the file's `rows.<id>.tune`: all of its method's `searchable` hyperparameters,
a list of them, or none), one `mooring sweep` (pipelines/sweep.py) runs in the file's tuning setting with the
tuning's overrides (a shorter budget), on a validation split held out of every client's training samples: the
trials never read a test set, and their first trial is the row's current values, so a tuned row is never worse on
validation than its defaults. A row with the paper's own grid (`tune_grid`) tries that grid in full, unpruned.

What a reviewer can accept of it: at least MIN_TRIALS trials a row (the report flags fewer); no pruning before a
third of the trials have completed, nor in a trial's first third of the rounds (pruner_settings); a value chosen
at a bound of its range widens that range and tunes the row again, up to `tuning.widen` times, and one still at a
bound is flagged in the report; each row records its trials completed and pruned, its own values and whether the
choice moved from them.

The chosen values are written, row by row as each sweep ends, into the tuned-values file of the budget tuned
(`configs/tables/<paper>.tuned.yaml` for the digits budget, `<paper>.<budget>.tuned.yaml` for a budget with a
`tuning:` of its own), which every later run of that budget reads. The studies live in one SQLite file under the
budget's results directory, so `--tune` run again resumes where it stopped and a finished row costs nothing; where
that directory is gone (another machine), the tuned-values file's record of an interrupted row's finished trials
puts them back (pipelines/tuning_progress.py).
"""
from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.experiment.config import ConfigError, ExperimentConfig, with_overrides
from pipelines.table_config import (
    DEFAULT_BUDGET,
    SettingRun,
    TableFile,
    TunedRow,
    TunedValues,
    Tuning,
    tuned_values_path,
    write_tuned_values,
)


def rows_to_tune(spec: TableFile, built: set[str]) -> list[str]:
    """The built rows that tune something, in the file's order."""
    return [r for r, row in spec.rows.items() if row.tune is not False and row.method in built]


def search_space(spec: TableFile, row_id: str) -> dict[str, dict[str, Any]]:
    """The row's searched hyperparameters with their ranges (the method's `searchable` declarations, or the row's
    `tune_grid` values), keyed by dotted config path; a `tune` list or a grid naming a hyperparameter the method
    does not search is refused."""
    from tasks.algorithms import ALGORITHMS

    row = spec.rows[row_id]
    method = ALGORITHMS.get(row.method)
    ranges = method.Params.search_space()
    if row.tune_grid:
        unknown = [name for name in row.tune_grid if name not in method.Params.model_fields]
        if unknown:
            raise ConfigError(f"rows.{row_id}.tune_grid: {', '.join(unknown)} is no hyperparameter of {row.method}; "
                              f"it has: {', '.join(method.Params.model_fields) or 'none'}")
        return {f"algorithm.{method.name}.{name}": {"type": "categorical", "choices": list(values)}
                for name, values in row.tune_grid.items()}
    wanted = list(ranges) if row.tune is True else list(row.tune)
    unknown = [name for name in wanted if name not in ranges]
    if unknown:
        raise ConfigError(f"rows.{row_id}.tune: {', '.join(unknown)} not searchable for {row.method}; searchable: "
                          f"{', '.join(ranges) or 'none'}")
    return {f"algorithm.{method.name}.{name}": ranges[name] for name in wanted}


def tuning_config(base: ExperimentConfig, variant: dict[str, Any], tuning: Tuning,
                  cli: dict[str, Any] | None = None) -> ExperimentConfig:
    """A row's config in the tuning setting, at the tuning's budget (the command line's --set `cli` winning over
    it, as it wins everywhere), with its validation split held out (the sweep scores every trial on it:
    pipelines/sweep_objective.py)."""
    return with_overrides(base, {**variant, **tuning.overrides, "data.validation_fraction": tuning.validation_fraction,
                                 **(cli or {})})


def inside(value: Any, spec: dict[str, Any]) -> bool:
    if spec["type"] == "categorical":
        return value in spec["choices"]
    return spec["low"] <= value <= spec["high"]


def starting_values(cfg: ExperimentConfig, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The row's current value of each searched hyperparameter that lies in its range: the first trial."""
    block = cfg.algorithm.params_for(cfg.algorithm.name)
    values = {}
    for path, spec in space.items():
        value = getattr(block, path.rsplit(".", 1)[1])
        if inside(value, spec):
            values[path] = value
    return values


def pruner_settings(trials: int, rounds: int) -> dict[str, Any]:
    """The median pruner, silent until a third of the trials have completed and, in every trial, for its first
    third of the rounds: a candidate is judged against several finished ones, on more than its first rounds."""
    return {"name": "median", "n_startup_trials": math.ceil(trials / 3), "n_warmup_steps": math.ceil(rounds / 3)}


def sweep_file(spec: TableFile, row_id: str, cfg: ExperimentConfig, space: dict[str, dict[str, Any]],
               tuning: Tuning, storage_url: str, base_name: str, parallel: int | None, study: str | None = None,
               enqueue: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The sweep that tunes one row: TPE over its ranges, the row's values first, the median pruner as
    pruner_settings says; or the row's paper grid, every point, unpruned."""
    metric, aggregate = (spec.tuning_metric(row_id, tuning).split(":", 1) + ["final"])[:2]
    start = starting_values(cfg, space)
    grid = bool(spec.rows[row_id].tune_grid)
    out = {
        "base": base_name,
        "params": space,
        "enqueue": enqueue if enqueue is not None else ([start] if start and not grid else []),
        "objective": {"metric": metric, "aggregate": aggregate},
        "test_best": False,  # the table's own runs measure the tuned values on the test sets
    }
    if grid:
        out |= {"sampler": {"name": "grid", "seed": tuning.seed}, "pruner": {"name": "none"}}
    else:
        out |= {"n_trials": tuning.trials,
                "sampler": {"name": "tpe", "seed": tuning.seed, "n_startup_trials": math.ceil(tuning.trials / 3)},
                "pruner": pruner_settings(tuning.trials, cfg.train.rounds)}
    return out | {"study": study or f"{spec.paper}-tune-{row_id}", "storage": storage_url} \
        | ({"parallel": parallel} if parallel else {})


# ------------------------------------------------------------------------------------ bounds
BOUND_SHARE = 0.05  # a choice within this share of its range's width (log-width for a log range) of a bound


def at_bounds(space: dict[str, dict[str, Any]], params: dict[str, Any]) -> dict[str, str]:
    """Each searched hyperparameter whose chosen value lies at a bound of its range: path → "low" or "high".
    A numeric grid counts its smallest and largest values as bounds; other choices have none."""
    found = {}
    for path, spec in space.items():
        value = params.get(path)
        if value is None or isinstance(value, bool):
            continue
        if spec["type"] == "categorical":
            numbers = [c for c in spec["choices"] if isinstance(c, (int, float)) and not isinstance(c, bool)]
            if len(numbers) < 2 or len(numbers) != len(spec["choices"]):
                continue
            low, high, log = min(numbers), max(numbers), False
        else:
            low, high, log = spec["low"], spec["high"], bool(spec.get("log"))
        where = position(value, low, high, log)
        if where <= BOUND_SHARE:
            found[path] = "low"
        elif where >= 1 - BOUND_SHARE:
            found[path] = "high"
    return found


def position(value: float, low: float, high: float, log: bool) -> float:
    """Where `value` lies in [low, high], 0 to 1 (on the log scale for a log range)."""
    if log:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (value - low) / (high - low)


def widened(cfg: ExperimentConfig, path: str, spec: dict[str, Any], side: str) -> dict[str, Any] | None:
    """The range with its `side` bound moved out: a decade for a log range, half its width otherwise, held to
    the values the config accepts (a weight ≥ 0, a momentum < 1); None where the bound cannot move."""
    low, high = spec["low"], spec["high"]
    if spec.get("log"):
        target = low / 10 if side == "low" else high * 10
    else:
        step = (high - low) / 2
        target = low - step if side == "low" else high + step
    if spec["type"] == "int":
        target = math.floor(target) if side == "low" else math.ceil(target)
    old = low if side == "low" else high
    for candidate in (target, (target + old) / 2, (3 * old + target) / 4):
        if spec["type"] == "int":
            candidate = math.floor(candidate) if side == "low" else math.ceil(candidate)
        if candidate == old or (spec.get("log") and candidate <= 0):
            continue
        try:
            with_overrides(cfg, {path: candidate})
        except ConfigError:
            continue
        return spec | ({"low": candidate} if side == "low" else {"high": candidate})
    return None


# ------------------------------------------------------------------------------------ one row
@dataclass(frozen=True)
class StudyOutcome:
    """What one study of a row ended with."""

    study: str
    completed: int
    pruned: int
    best_params: dict[str, Any]  # dotted path → value
    best_value: float


@dataclass
class Search:
    """A row's search over its studies: the last study's outcome, the ranges it searched, the trials of every
    study, the ranges that were widened (path → the range before), and the choices still at a bound."""

    last: StudyOutcome
    space: dict[str, dict[str, Any]]
    completed: int = 0
    pruned: int = 0
    widened_from: dict[str, str] = field(default_factory=dict)
    bounds: dict[str, str] = field(default_factory=dict)


def search_with_widening(cfg: ExperimentConfig, space: dict[str, dict[str, Any]], widen: int, grid: bool,
                         run_study: Callable[[int, dict[str, dict[str, Any]], list | None], StudyOutcome],
                         echo=print) -> Search:
    """`run_study(attempt, space, enqueue)`, then, while its choice lies at a bound of a range that can widen
    (widened), again over the widened ranges with the best so far as its first trial, at most `widen` times. A
    grid (the paper's own) is run once: its ends are flagged, not widened."""
    first = dict(space)
    search = None
    enqueue = None
    for attempt in range(widen + 1):
        outcome = run_study(attempt, space, enqueue)
        search = Search(outcome, space, (search.completed if search else 0) + outcome.completed,
                        (search.pruned if search else 0) + outcome.pruned,
                        search.widened_from if search else {})
        search.bounds = at_bounds(space, outcome.best_params)
        wider = {} if grid else {p: widened(cfg, p, space[p], side) for p, side in search.bounds.items()}
        wider = {p: r for p, r in wider.items() if r is not None}
        if not wider or attempt == widen:
            return search
        echo("; ".join(f"{p} = {outcome.best_params[p]:.4g} at its {search.bounds[p]} bound" for p in wider)
             + "; tuning again over " + ", ".join(f"{p} in {range_text(r)}" for p, r in wider.items()))
        for p in wider:
            search.widened_from.setdefault(p, range_text(first[p]))
        space = {**space, **wider}
        enqueue = [outcome.best_params]
    return search


def study_storage(tuning_dir: Path) -> str:
    """The SQLite storage of every row's studies."""
    return f"sqlite:///{(tuning_dir / 'optuna.db').absolute()}"


def study_base(spec: TableFile, row_id: str) -> str:
    """The name of a row's first study (its widened searches add -widened<n>)."""
    return f"{spec.paper}-tune-{row_id}"


def tune_row(spec: TableFile, row_id: str, cfg: ExperimentConfig, space: dict[str, dict[str, Any]],
             tuning: Tuning, tuning_dir: Path, address: str | None, parallel: int | None, echo) -> TunedRow:
    """One row's sweep (resumed where an earlier --tune left it), widened where its choice lies at a bound
    (search_with_widening); what it chose, with its counts, its own values and whether it moved from them."""
    from pipelines.sweep import run_sweep
    from pipelines.sweep_file import load_sweep

    base_path = tuning_dir / f"{row_id}.base.yaml"
    base_path.write_text(cfg.to_yaml())
    storage_url = study_storage(tuning_dir)
    grid = bool(spec.rows[row_id].tune_grid)

    def run_study(attempt: int, space: dict[str, dict[str, Any]], enqueue: list | None) -> StudyOutcome:
        study = study_base(spec, row_id) + (f"-widened{attempt}" if attempt else "")
        sweep_path = tuning_dir / f"{row_id}{f'.widened{attempt}' if attempt else ''}.sweep.yaml"
        sweep_path.write_text(yaml.safe_dump(sweep_file(spec, row_id, cfg, space, tuning, storage_url,
                                                        base_path.name, parallel, study, enqueue), sort_keys=False))
        result = run_sweep(load_sweep(sweep_path), address=address, echo=echo)
        if result.best_number is None:
            raise ConfigError(f"--tune: row {row_id}: no trial of study {result.study_name} completed "
                              f"({result.failed} failed); see {tuning_dir}")
        return StudyOutcome(result.study_name, result.complete, result.pruned, result.best_params,
                            float(result.best_value))

    search = search_with_widening(cfg, space, tuning.widen, grid, run_study, lambda s: echo(f"tune {row_id}: {s}"))
    return tuned_row(spec, row_id, tuning, search, starting_values(cfg, space), grid)


def tuned_row(spec: TableFile, row_id: str, tuning: Tuning, search: Search, start: dict[str, Any],
              grid: bool) -> TunedRow:
    """The tuned-values record of a row's search."""
    name_of = {path: path.rsplit(".", 1)[1] for path in search.space}
    chosen = {name_of[p]: v for p, v in search.last.best_params.items()}
    own = {name_of[p]: v for p, v in start.items()}
    return TunedRow(params=chosen, searched=searched_ranges(search.space),
                    metric=spec.tuning_metric(row_id, tuning), trials=search.completed + search.pruned,
                    best_validation=round(search.last.best_value, 6), study=search.last.study,
                    date=datetime.date.today().isoformat(), completed=search.completed, pruned=search.pruned,
                    start=own, moved=chosen != own,
                    widened={name_of[p]: r for p, r in search.widened_from.items()},
                    at_bound={name_of[p]: side for p, side in search.bounds.items()}, grid=grid)


def range_text(spec: dict[str, Any]) -> str:
    if spec["type"] == "categorical":
        return "{" + ", ".join(map(str, spec["choices"])) + "}"
    return f"{spec['low']:g}..{spec['high']:g}" + (" log" if spec.get("log") else "")


def searched_ranges(space: dict[str, dict[str, Any]]) -> dict[str, str]:
    """hyperparameter → its range as the tuned-values file writes it."""
    return {path.rsplit(".", 1)[1]: range_text(spec) for path, spec in space.items()}


def already_tuned(row: TunedRow | None, space: dict[str, dict[str, Any]]) -> bool:
    """Whether a recorded choice came from a search over `space` as it stands (the ranges it started from, before
    any widening): a tuning that stopped, on a machine whose study storage is gone, goes on from the next row."""
    if row is None:
        return False
    return {**row.searched, **row.widened} == searched_ranges(space)


def kept_rows(spec: TableFile, run: SettingRun, budget: str, cli_overrides: list[str], retune: bool) -> set[str]:
    """The rows of `run` whose recorded choice --tune keeps rather than searching again: chosen in the same
    tuning, --set and ranges (none with `retune`)."""
    state = spec.tuned_state(budget)
    if retune or state.drift or state.set != list(cli_overrides):
        return set()
    return {r for r in run.variants if already_tuned(state.rows.get(r), search_space(spec, r))}


def progress_record(in_progress: dict[str, dict[str, Any]], row_id: str,
                    space: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The row's record of an interrupted tuning, where it searched `space` as it stands (None otherwise)."""
    record = in_progress.get(row_id)
    return record if record and record.get("searched") == searched_ranges(space) else None


def trials_recorded(spec: TableFile, budget: str, row_id: str) -> int:
    """The finished trials of the row's first study that the tuned-values file carries from an interrupted
    tuning (put back by the next --tune where they searched the same ranges)."""
    record = progress_record(spec.tuned_state(budget).in_progress, row_id, search_space(spec, row_id))
    return len(record["studies"].get(study_base(spec, row_id), {}).get("trials", [])) if record else 0


def tune(spec: TableFile, run: SettingRun, source: str, results: Path, address: str | None, parallel: int | None,
         echo, cli_overrides: list[str] = (), budget: str = DEFAULT_BUDGET, retune: bool = False) -> Path:
    """Every row of `run` (the tuning setting, its rows that tune), one sweep each (and more where a choice lies
    at a bound), its choice written to the budget's tuned-values file as soon as it is made, with the --set the
    trials ran with. Earlier choices are kept until their row is tuned again only where they came from the same
    tuning and --set; a row whose choice is recorded from the same tuning, --set and ranges is not searched again
    unless `retune`."""
    from orchestrator.experiment.config import parse_override

    tuning = spec.tuning_of(budget)
    state = spec.tuned_state(budget)
    out = tuned_values_path(spec, source, budget)
    cli = {".".join(path): value for path, value in map(parse_override, cli_overrides)}
    same = not state.drift and state.set == list(cli_overrides)
    kept = kept_rows(spec, run, budget, cli_overrides, retune)
    values = TunedValues(tuning=tuning.model_dump(), set=list(cli_overrides), rows=dict(state.rows) if same else {},
                         in_progress=dict(state.in_progress) if same else {})
    tuning_dir = results / "tuning"
    tuning_dir.mkdir(parents=True, exist_ok=True)
    spaces = {row_id: search_space(spec, row_id) for row_id in run.variants}  # every `tune` list checked first
    for row_id, variant in run.variants.items():
        space = spaces[row_id]
        if not space:
            echo(f"tune {row_id}: {spec.rows[row_id].method} has no searchable hyperparameters")
            continue
        if row_id in kept:
            echo(f"tune {row_id}: kept {state.rows[row_id].params} from {out} (the same tuning, --set and ranges; "
                 "--retune searches again)")
            continue
        how = "the paper's grid in full" if spec.rows[row_id].tune_grid else f"{tuning.trials} trials"
        echo(f"tune {row_id}: {how} of {', '.join(space)} in {tuning.setting}'s validation split")
        put_back_progress(spec, row_id, space, values, tuning_dir, echo)
        cfg = tuning_config(run.base, variant, tuning, cli)
        try:
            values.rows[row_id] = tune_row(spec, row_id, cfg, space, tuning, tuning_dir, address, parallel, echo)
        except BaseException:
            record_progress(spec, row_id, space, values, tuning_dir)
            write_tuned_values(out, values, spec.paper, source)
            raise
        values.in_progress.pop(row_id, None)
        write_tuned_values(out, values, spec.paper, source)
        echo(f"tune {row_id}: chose {values.rows[row_id].params} (validation {values.rows[row_id].best_validation})")
    return out


def put_back_progress(spec: TableFile, row_id: str, space: dict[str, dict[str, Any]], values: TunedValues,
                      tuning_dir: Path, echo) -> None:
    """The finished trials an interrupted tuning of the row recorded, put back into its studies where this
    machine's storage lacks them (a record from other ranges is dropped: its trials searched another space)."""
    from pipelines.tuning_progress import restore_progress

    record = progress_record(values.in_progress, row_id, space)
    if record is None:
        values.in_progress.pop(row_id, None)
        return
    restored = restore_progress(study_storage(tuning_dir), record["studies"])
    if restored:
        echo(f"tune {row_id}: {restored} finished trials of an interrupted tuning put back from the tuned-values "
             "file; the row goes on from them")


def record_progress(spec: TableFile, row_id: str, space: dict[str, dict[str, Any]], values: TunedValues,
                    tuning_dir: Path) -> None:
    """The finished trials of the row's studies, kept in `values` for the next --tune, wherever it runs; a
    storage that cannot be read now leaves the earlier record as it was (the stop that got here is what the
    caller reports)."""
    from pipelines.tuning_progress import study_progress

    try:
        studies = study_progress(study_storage(tuning_dir), study_base(spec, row_id))
    except Exception:
        return
    if studies:
        values.in_progress[row_id] = {"searched": searched_ranges(space), "studies": studies}
