"""`mooring table CONFIG --tune`: each row's hyperparameters tuned on a validation split, as the papers tuned their
baselines ("in a reasonable range", the best reported).

For every built row that `tune`s (the file's `rows.<id>.tune`: all of its method's `searchable` hyperparameters,
a list of them, or none), one `mooring sweep` (pipelines/sweep.py) runs in the file's tuning setting with the
tuning's overrides (a shorter budget), on a validation split held out of every client's training samples: the
trials never read a test set, and their first trial is the row's current values, so a tuned row is never worse on
validation than its defaults. The chosen values are written, row by row as each sweep ends, into the table's
tuned-values file (`tuned:` in the table file, `configs/tables/<paper>.tuned.yaml`), which every later run of the
table's digits budget reads. The studies live in one SQLite file under the results directory, so `--tune` run
again resumes where it stopped and a finished row costs nothing.
"""
from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import yaml

from orchestrator.experiment.config import ConfigError, ExperimentConfig, with_overrides
from pipelines.table_config import (
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
    """The row's searched hyperparameters with their ranges (the method's `searchable` declarations), keyed by
    dotted config path; a `tune` list naming a hyperparameter the method does not search is refused."""
    from tasks.algorithms import ALGORITHMS

    row = spec.rows[row_id]
    method = ALGORITHMS.get(row.method)
    ranges = method.Params.search_space()
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


def starting_values(cfg: ExperimentConfig, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The row's current value of each searched hyperparameter that lies in its range: the first trial."""
    block = cfg.algorithm.params_for(cfg.algorithm.name)
    values = {}
    for path, spec in space.items():
        value = getattr(block, path.rsplit(".", 1)[1])
        inside = value in spec["choices"] if spec["type"] == "categorical" else spec["low"] <= value <= spec["high"]
        if inside:
            values[path] = value
    return values


def sweep_file(spec: TableFile, row_id: str, cfg: ExperimentConfig, space: dict[str, dict[str, Any]],
               tuning: Tuning, storage_url: str, base_name: str, parallel: int | None) -> dict[str, Any]:
    """The sweep that tunes one row: TPE over its ranges, the row's values first, the median pruner."""
    metric, aggregate = (spec.tuning_metric(row_id).split(":", 1) + ["final"])[:2]
    warmup = max(1, cfg.train.rounds // 3)
    start = starting_values(cfg, space)
    return {
        "base": base_name,
        "params": space,
        "enqueue": [start] if start else [],
        "objective": {"metric": metric, "aggregate": aggregate},
        "n_trials": tuning.trials,
        "sampler": {"name": "tpe", "seed": tuning.seed, "n_startup_trials": max(1, tuning.trials // 3)},
        "pruner": {"name": "median", "n_startup_trials": max(1, tuning.trials // 3), "n_warmup_steps": warmup},
        "study": f"{spec.paper}-tune-{row_id}",
        "storage": storage_url,
    } | ({"parallel": parallel} if parallel else {})


def tune_row(spec: TableFile, row_id: str, cfg: ExperimentConfig, space: dict[str, dict[str, Any]],
             tuning: Tuning, tuning_dir: Path, address: str | None, parallel: int | None, echo) -> TunedRow:
    """One row's sweep (resumed where an earlier --tune left it), and what it chose."""
    from pipelines.sweep import run_sweep
    from pipelines.sweep_file import load_sweep

    base_path = tuning_dir / f"{row_id}.base.yaml"
    base_path.write_text(cfg.to_yaml())
    sweep_path = tuning_dir / f"{row_id}.sweep.yaml"
    storage_url = f"sqlite:///{(tuning_dir / 'optuna.db').absolute()}"
    sweep_path.write_text(yaml.safe_dump(sweep_file(spec, row_id, cfg, space, tuning, storage_url, base_path.name, parallel),
                                         sort_keys=False))
    result = run_sweep(load_sweep(sweep_path), address=address, echo=echo)
    if result.best_number is None:
        raise ConfigError(f"--tune: row {row_id}: no trial of study {result.study_name} completed "
                          f"({result.failed} failed); see {tuning_dir}")
    name_of = {path: path.rsplit(".", 1)[1] for path in space}
    return TunedRow(params={name_of[p]: v for p, v in result.best_params.items()},
                    searched={name_of[p]: range_text(s) for p, s in space.items()},
                    metric=spec.tuning_metric(row_id),
                    trials=result.complete + result.pruned, best_validation=round(float(result.best_value), 6),
                    study=result.study_name, date=datetime.date.today().isoformat())


def range_text(spec: dict[str, Any]) -> str:
    if spec["type"] == "categorical":
        return "{" + ", ".join(map(str, spec["choices"])) + "}"
    return f"{spec['low']:g}..{spec['high']:g}" + (" log" if spec.get("log") else "")


def tune(spec: TableFile, run: SettingRun, source: str, results: Path, address: str | None, parallel: int | None,
         echo, cli_overrides: list[str] = ()) -> Path:
    """Every row of `run` (the tuning setting, its rows that tune), one sweep each, its choice written to the
    tuned-values file as soon as it is made, with the --set the trials ran with. Earlier choices are kept until
    their row is tuned again only where they came from the same tuning and --set."""
    from orchestrator.experiment.config import parse_override

    tuning = spec.tuning
    out = tuned_values_path(spec, source)
    cli = {".".join(path): value for path, value in map(parse_override, cli_overrides)}
    same = not spec.tuning_drift and spec.tuned_set == list(cli_overrides)
    values = TunedValues(tuning=tuning.model_dump(), set=list(cli_overrides),
                         rows=dict(spec.tuned_rows) if same else {})
    tuning_dir = results / "tuning"
    tuning_dir.mkdir(parents=True, exist_ok=True)
    spaces = {row_id: search_space(spec, row_id) for row_id in run.variants}  # every `tune` list checked first
    for row_id, variant in run.variants.items():
        space = spaces[row_id]
        if not space:
            echo(f"tune {row_id}: {spec.rows[row_id].method} has no searchable hyperparameters")
            continue
        echo(f"tune {row_id}: {tuning.trials} trials of {', '.join(space)} in {tuning.setting}'s validation split")
        cfg = tuning_config(run.base, variant, tuning, cli)
        values.rows[row_id] = tune_row(spec, row_id, cfg, space, tuning, tuning_dir, address, parallel,
                                     echo)
        write_tuned_values(out, values, spec.paper, source)
        echo(f"tune {row_id}: chose {values.rows[row_id].params} (validation {values.rows[row_id].best_validation})")
    return out
