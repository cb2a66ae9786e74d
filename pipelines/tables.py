"""`mooring table`: a paper's results tables, every cell run by Mooring, written beside the paper's numbers.

    mooring table configs/tables/fedfm.yaml --budget mnist   # the paper's federation on MNIST → docs/tables/fedfm.md
    mooring table configs/tables/fedfm.yaml                 # the digits budget → docs/tables/fedfm.digits.md
    mooring table configs/tables/fedfm.yaml --check         # validate every cell's config, run nothing
    mooring table configs/tables/fedfm.yaml --budget paper --check   # the paper's protocol: configs, data, start

Each setting of the budget is one `compare` (pipelines/compare.py) of the rows that have a paper number in one of
its columns, on the same partitions and seeds; a row whose method is not registered is "not built", never run.
The file's schema is pipelines/table_config.py; the report, pipelines/table_report.py.
"""
from __future__ import annotations

import copy
import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestrator.arguments import add_outside_code_arg
from pipelines.claims import saved_comparison
from pipelines.comparison import Comparison
from pipelines.table_config import (
    ALGORITHM_SLOT,
    DEFAULT_BUDGET,
    REPORT_BUDGET,
    BudgetPlan,
    ColumnPlan,
    SettingRun,
    TableFile,
    load_table_file,
    resolve_budget,
)
from pipelines.table_report import Cell, CellState, measure, render_report


def built_methods(spec: TableFile) -> set[str]:
    """The rows' methods that are registered now. A `module:attribute` method under --no-outside-code is refused
    in one line, not shown as "not built" as if it did not exist."""
    from orchestrator.experiment.config import ConfigError
    from tasks.algorithms import ALGORITHMS
    from tasks.registry import OutsideCode, RegistryError, is_reference

    built = set()
    for row_id, row in spec.rows.items():
        try:
            ALGORITHMS.find(row.method)
        except RegistryError as e:
            if is_reference(row.method) and OutsideCode.refused:
                raise ConfigError(f"rows.{row_id}.method: {row.method}: {e}") from None
            continue
        built.add(row.method)
    return built


# ---------------------------------------------------------------------------------------------- planning
def rows_to_run(plan: BudgetPlan, setting: str, built: set[str], spec: TableFile) -> list[str]:
    """The built rows with a paper number in some column that this setting reproduces (any row of the table in a
    column the paper only plots), in the file's order."""
    wanted = {row for c in plan.columns if c.setting == setting
              for row in c.table.paper if c.column.figure or c.table.numbers(row)[c.index].value is not None}
    return [r for r in spec.rows if r in wanted and spec.rows[r].method in built]


def variant_overrides(spec: TableFile, row_id: str, setting: str, plan: BudgetPlan,
                      cli: dict[str, Any]) -> dict[str, Any]:
    """A row's overrides in a setting: its method and hyperparameters, the setting's keys that name each row's
    method ({algorithm}), the row's own overrides and those it has for this setting, then the command line's
    (which win)."""
    row = spec.rows[row_id]
    out: dict[str, Any] = {"algorithm.name": row.method}
    params = row.params | (plan.tuned[row_id].params if row_id in plan.tuned else {})
    out |= {f"algorithm.{row.method}.{key}": value for key, value in params.items()}  # set_dotted copies each
    out |= {k.replace(ALGORITHM_SLOT, row.method): v for k, v in plan.settings[setting].items() if ALGORITHM_SLOT in k}
    return out | row.overrides | row.per_setting.get(setting, {}) | cli


def plan_settings(spec: TableFile, plan: BudgetPlan, built: set[str], cli_overrides: list[str],
                  source: str) -> list[SettingRun]:
    """Every setting a column of the budget uses, with its base config and its rows, each config validated."""
    settings = dict.fromkeys(c.setting for c in plan.columns if c.setting is not None)
    return [setting_run(spec, plan, s, rows_to_run(plan, s, built, spec), cli_overrides, source) for s in settings]


def setting_run(spec: TableFile, plan: BudgetPlan, setting: str, row_ids: list[str], cli_overrides: list[str],
                source: str) -> SettingRun:
    """One setting's base config and the given rows' overrides on it, each config validated."""
    from orchestrator.experiment.config import (
        ConfigError,
        apply_overrides,
        build_config,
        parse_override,
        set_dotted,
        with_overrides,
    )

    cli = {".".join(path): value for path, value in map(parse_override, cli_overrides)}
    raw = copy.deepcopy(plan.experiment)
    for key, value in plan.settings[setting].items():
        if ALGORITHM_SLOT not in key:
            set_dotted(raw, key, value)
    raw["name"] = f"{spec.paper}-{plan.name}-{setting}"
    base = build_config(apply_overrides(raw, list(cli_overrides)), f"{source}: setting {setting}")
    variants = {r: variant_overrides(spec, r, setting, plan, cli) for r in row_ids}
    for row_id, overrides in variants.items():
        try:
            with_overrides(base, overrides)
        except ConfigError as e:
            raise ConfigError(f"{source}: setting {setting}, row {row_id}: {e}") from None
    return SettingRun(setting, base, variants)


# ----------------------------------------------------------------------------------------------- running
def run_settings(runs: list[SettingRun], seeds: list[int], results: Path, address: str | None,
                 parallel: int | None, echo=print, report_only: bool = False,
                 progress: bool = True, plan: BudgetPlan | None = None) -> dict[str, Comparison]:
    """One compare per setting, of the runs it has not saved yet (run_setting); or, with report_only, the
    histories earlier runs saved under `results`, as far as they go."""
    comps = {}
    if report_only:
        comps = {run.setting: saved(results / run.setting) if run.variants else Comparison() for run in runs}
        if not any(c.histories for c in comps.values()):
            first = next((r.setting for r in runs if r.variants), runs[0].setting if runs else "")
            raise_no_results(results / first)
        missing = [f"{r.setting}: {row} (seeds {', '.join(map(str, left))})" for r in runs for row in r.variants
                   if (left := [s for s in seeds if s not in comps[r.setting].histories.get(row, {})])]
        if missing:
            echo("--report-only: not finished, reported as such: " + "; ".join(missing))
        return comps
    started = time.perf_counter()
    for i, run in enumerate(runs):
        if not run.variants:
            comps[run.setting] = Comparison()
            continue
        comps[run.setting] = run_setting(run, seeds, results / run.setting, address, parallel, echo, progress)
        if plan is not None and plan.timing is None and i + 1 < len(runs):
            left = sum(len(r.variants) for r in runs[i + 1:]) * len(seeds)
            ran = sum(len(r.variants) for r in runs[:i + 1]) * len(seeds)
            per_run = (time.perf_counter() - started) / max(1, ran)
            echo(f"estimate: {left} runs to go, about {minutes(left * per_run)} at the pace of the first "
                 f"{i + 1} setting{'s' if i else ''}")
    return comps


FINGERPRINTS = "fingerprints.json"  # row → the fingerprint of the config its saved histories ran with


def fingerprint(base, variant: dict[str, Any]) -> str:
    """What a row's runs in a setting depend on: every value its config sets apart from Mooring's defaults, but
    for the seed (each history is kept by seed), the run's name and where it logs and checkpoints. Values at
    their defaults count as code, which a fingerprint does not cover either: a new config field leaves saved
    runs standing until a table sets it."""
    from orchestrator.experiment.config import digest, with_overrides

    return digest(with_overrides(base, variant).model_dump(mode="json", exclude_defaults=True,
                                                           exclude={"seed", "name", "tracking", "checkpoint"}))


def saved_runs(setting_dir: Path, prints: dict[str, str]) -> dict[str, dict[int, list]]:
    """The histories saved in `setting_dir` whose row still runs the config they ran with."""
    import json

    path, prints_path = setting_dir / "histories.json", setting_dir / FINGERPRINTS
    if not path.exists() or not prints_path.exists():
        return {}
    try:
        histories, then = json.loads(path.read_text()), json.loads(prints_path.read_text())
    except ValueError:
        return {}
    return {row: {int(seed): h for seed, h in by_seed.items()} for row, by_seed in histories.items()
            if row in prints and then.get(row) == prints[row]}


SECONDS = "seconds.json"  # row → seed → the run's own wall seconds, as compare measured it


def measured_seconds(out: Path) -> dict[str, dict[int, float]]:
    """Each finished run's wall seconds, from the runs table a compare wrote to `out`."""
    import pyarrow.parquet as pq

    if not (out / "runs.parquet").exists():
        return {}
    seconds: dict[str, dict[int, float]] = {}
    for row in pq.read_table(out / "runs.parquet").to_pylist():
        if not row.get("failed") and row.get("wall_seconds") is not None:
            seconds.setdefault(row["variant"], {})[int(row["seed"])] = float(row["wall_seconds"])
    return seconds


def saved_seconds(setting_dir: Path) -> dict[str, dict[int, float]]:
    """The wall seconds of the runs saved in `setting_dir` (none recorded: {})."""
    import json

    try:
        raw = json.loads((setting_dir / SECONDS).read_text())
        return {row: {int(seed): float(s) for seed, s in by_seed.items()} for row, by_seed in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def write_saved(setting_dir: Path, histories: dict[str, dict[int, list]], prints: dict[str, str],
                seconds: dict[str, dict[int, float]]) -> None:
    """The setting's histories, their rows' fingerprints and their runs' wall seconds, each file replaced whole."""
    import json

    from orchestrator.io import storage

    setting_dir.mkdir(parents=True, exist_ok=True)
    kept = {row: by_seed for row, by_seed in histories.items() if by_seed}
    storage.write_bytes_atomic(str((setting_dir / "histories.json").absolute()),
                               json.dumps({r: {str(s): h for s, h in sorted(b.items())} for r, b in kept.items()})
                               .encode())
    storage.write_bytes_atomic(str((setting_dir / FINGERPRINTS).absolute()),
                               json.dumps({r: prints[r] for r in kept}, indent=1).encode())
    timed = {r: {str(s): seconds[r][s] for s in sorted(b) if s in seconds.get(r, {})} for r, b in kept.items()}
    storage.write_bytes_atomic(str((setting_dir / SECONDS).absolute()), json.dumps(timed, indent=1).encode())


def run_setting(run: SettingRun, seeds: list[int], setting_dir: Path, address: str | None, parallel: int | None,
                echo, progress: bool) -> Comparison:
    """The setting's runs not saved yet under `setting_dir` (a run is saved once it finishes, with the
    fingerprint of its config: one whose row's config has changed since runs again), one compare per group of
    rows missing the same seeds; the first into `setting_dir`, later ones into `resumed-<n>/` beside it. The
    setting's histories.json holds every finished run, also after a stop or a failure."""
    import json

    from pipelines.compare import compare

    prints = {row: fingerprint(run.base, v) for row, v in run.variants.items()}
    kept, seconds = saved_runs(setting_dir, prints), saved_seconds(setting_dir)
    missing: dict[tuple[int, ...], list[str]] = {}
    for row in run.variants:
        todo = tuple(s for s in seeds if s not in kept.get(row, {}))
        if todo:
            missing.setdefault(todo, []).append(row)
    have = sum(len(kept.get(r, {})) for r in run.variants)
    if not missing:
        echo(f"{run.setting}: every run saved in {setting_dir}; none run again")
    for todo, rows in missing.items():
        fresh = not (setting_dir / "histories.json").exists()
        out = setting_dir if fresh else next(setting_dir / f"resumed-{n}" for n in range(10_000)
                                             if not (setting_dir / f"resumed-{n}").exists())
        echo(f"{run.setting}: {', '.join(rows)} × seeds {', '.join(map(str, todo))}"
             + (f" ({have} runs saved before, kept)" if have else ""))
        try:
            compare(run.base, {r: run.variants[r] for r in rows}, list(todo), out, address=address,
                    parallel=parallel, echo=echo, progress=progress, out_option="--results")
        finally:
            done = out / "histories.json"
            if done.exists():
                for row, by_seed in json.loads(done.read_text()).items():
                    kept.setdefault(row, {}).update({int(s): h for s, h in by_seed.items()})
            for row, by_seed in measured_seconds(out).items():
                seconds.setdefault(row, {}).update(by_seed)
            write_saved(setting_dir, kept, prints, seconds)
    return Comparison(histories={row: {s: kept[row][s] for s in seeds if s in kept.get(row, {})}
                                 for row in run.variants if kept.get(row)})


def reported_seconds(runs: list[SettingRun], comps: dict[str, Comparison], results: Path) -> list[float | None]:
    """Each reported run's wall seconds (None: saved without them), from what the settings saved."""
    out: list[float | None] = []
    for run in runs:
        seconds = saved_seconds(results / run.setting)
        out += [seconds.get(row, {}).get(seed) for row, by_seed in comps[run.setting].histories.items()
                for seed in by_seed]
    return out


def saved(setting_dir: Path) -> Comparison:
    """The histories earlier runs of this setting saved (none yet: an empty comparison, its cells "no run")."""
    if not (setting_dir / "histories.json").exists():
        return Comparison()
    return saved_comparison(setting_dir, (), "run the table first (or give its --results)")


def raise_no_results(setting_dir: Path) -> None:
    from orchestrator.experiment.config import ConfigError

    raise ConfigError(f"--report-only: no saved results at {setting_dir / 'histories.json'}; run the table "
                      "first (or give its --results)")


def table_cells(spec: TableFile, plan: BudgetPlan, built: set[str],
                comps: dict[str, Comparison]) -> dict[tuple[str, int], dict[str, Cell]]:
    """Every cell of every table: (table id, column index) → row id → Cell."""
    return {(c.table.id, c.index): {row_id: column_cell(spec, c, row_id, built, comps) for row_id in c.table.paper}
            for c in plan.columns}


def column_cell(spec: TableFile, c: ColumnPlan, row_id: str, built: set[str],
                comps: dict[str, Comparison]) -> Cell:
    paper = c.table.numbers(row_id)[c.index]
    if c.setting is None:
        return Cell(paper, CellState.NOT_EXPRESSIBLE)
    if paper.value is None and not c.column.figure:  # a column the paper only plots shows Mooring's numbers
        return Cell(paper, CellState.NO_PAPER_NUMBER)
    if spec.rows[row_id].method not in built:
        return Cell(paper, CellState.NOT_BUILT)
    histories = comps[c.setting].histories.get(row_id, {})
    if not histories:
        return Cell(paper, CellState.NO_RUN)
    m = measure(histories, c)
    return Cell(paper, CellState.NO_METRIC) if m is None else Cell(paper, CellState.MEASURED, m)


# -------------------------------------------------------------------------------------------- checking
class Preflight:
    """What a run needs before it trains, each checked once however many cells share it: the output
    directories, the dataset's files (a missing one named with its directory and the files expected), the
    partition of every seed (built in memory, not stored), and the method with its global state built on the
    data's shape. Nothing is trained or written; `problems` holds one line per distinct problem."""

    def __init__(self) -> None:
        self.datasets: dict[str, Any] = {}
        self.done: set[tuple[str, ...]] = set()
        self.problems: dict[str, str] = {}

    def check(self, setting: str, cfg, seeds: list[int]) -> None:
        from orchestrator.driver.run_dir import check_output_dirs
        from orchestrator.experiment.config import ConfigError
        from tasks.data.datasets import DataFileError, DatasetNotFound
        from tasks.data.partition import PartitionError

        try:
            check_output_dirs(cfg)
            data = self.dataset(cfg)
            self.partitions(cfg, data, seeds)
            self.once(("start", cfg.algorithm.model_dump_json(), cfg.model.model_dump_json(),
                       cfg.data.model_dump_json()), lambda: start_method(cfg, data))
        except (DatasetNotFound, DataFileError, PartitionError, ConfigError) as e:
            self.problems.setdefault(str(e), f"{setting}: {e}")
        except ValueError as e:  # the method or its model cannot be built on this data (a model too deep for 8×8)
            self.problems.setdefault(str(e), f"{setting}, {cfg.algorithm.name}: {e}")

    def dataset(self, cfg):
        from tasks.data.datasets import load_dataset

        key = cfg.data.model_dump_json(include={"dataset", "root", "download", "emnist_split", "test_fraction",
                                                "split_seed", "pad"}) + str(cfg.split_seed)
        if key not in self.datasets:
            try:
                self.datasets[key] = load_dataset(cfg.data.model_copy(update={"split_seed": cfg.split_seed}))
            except Exception as e:  # noqa: BLE001 - kept, so the cells that share the data are not retried
                self.datasets[key] = e
        if isinstance(self.datasets[key], Exception):
            raise self.datasets[key]
        return self.datasets[key]

    def partitions(self, cfg, data, seeds: list[int]) -> None:
        from tasks.data.partition import make_partition

        for seed in seeds:
            self.once(("partition", cfg.data.model_dump_json(), str(seed)),
                      lambda s=seed: make_partition(data.y_train, cfg.data, s, data.owners))

    def once(self, key: tuple[str, ...], check) -> None:
        if key not in self.done:
            check()
            self.done.add(key)


def preflight(runs: list[SettingRun], seeds: list[int]) -> list[str]:
    """Every cell's run checked as far as it goes before training (Preflight); the problems, one line each."""
    from orchestrator.experiment.config import with_overrides

    checks = Preflight()
    for run in runs:
        for overrides in run.variants.values():
            checks.check(run.setting, with_overrides(run.base, overrides), seeds)
    return list(checks.problems.values())


def start_method(cfg, data) -> None:
    """The method and its global state, built on the data's shape as a run's first step builds them."""
    from orchestrator.experiment.methods import build_algorithm

    build_algorithm(cfg, data.num_classes, tuple(data.x_train.shape[1:])).init_global()


# --------------------------------------------------------------------------------------------------- CLI
def configure(parser) -> None:
    parser.add_argument("config", metavar="TABLE_CONFIG", help="a paper's tables: configs/tables/<paper>.yaml")
    parser.add_argument("--budget", default=DEFAULT_BUDGET, metavar="NAME",
                        help=f"{DEFAULT_BUDGET} (default): the spec's small-scale protocol, a quick budget; "
                             f"{REPORT_BUDGET}: the paper's federation on MNIST, the budget docs/tables/ is made from; "
                             "smoke: a few minutes; paper: the paper's own datasets, models, clients and rounds (the "
                             "file's budgets)")
    parser.add_argument("--check", action="store_true",
                        help="validate every cell's config and list the rows not built, running nothing; with "
                             "--budget paper also that the data are on disk and each method starts on them")
    parser.add_argument("--out", default=None, metavar="MARKDOWN",
                        help=f"report to write (default: docs/tables/<paper>.md for the {REPORT_BUDGET} budget; "
                             "<paper>.<budget>.md for another)")
    parser.add_argument("--results", default=None, metavar="DIR",
                        help="directory for each setting's comparison (default: results/tables/<paper>/<budget>); "
                             "one command at a time writes it")
    parser.add_argument("--seeds", default=None, metavar="S,S,...", help="override the budget's seeds")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override every run (a smaller budget: --set train.rounds=5); recorded in the report")
    parser.add_argument("--parallel", type=int, default=None, metavar="N", help="runs at once (default: the CPUs')")
    parser.add_argument("--address", default=None, metavar="RAY_ADDRESS",
                        help="an existing Ray cluster; default: RAY_ADDRESS if set, else a new local Ray instance")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (finished runs are still listed)")
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the report from the histories saved under --results, running nothing")
    parser.add_argument("--tune", action="store_true",
                        help="tune every row's hyperparameters on a validation split (the budget's `tuning:`, one "
                             "sweep per row; resumes an interrupted one) and write them to the budget's tuned-values "
                             "file, running no cell; the next run of the budget uses them. A row whose choice "
                             "the file already holds from the same tuning is kept")
    parser.add_argument("--retune", action="store_true",
                        help="with --tune: search every row again, also those the tuned-values file holds")
    add_outside_code_arg(parser)


def reproduce_command(args, default_report: str) -> str:
    """The command that writes this report again: --out named where it is not the budget's default report."""
    parts = ["mooring table", args.config]
    if args.budget != DEFAULT_BUDGET:
        parts.append(f"--budget {args.budget}")
    if args.seeds:
        parts.append(f"--seeds {args.seeds}")
    parts += [f"--set {o}" for o in args.overrides]
    if args.out is not None and Path(args.out) != Path(default_report):
        parts.append(f"--out {args.out}")
    return " ".join(parts)


def default_out(spec: TableFile, budget: str) -> str:
    """docs/tables/<paper>.md for the budget the published reports are made from (the `mnist` budget where the
    file has one, else the digits budget), docs/tables/<paper>.<budget>.md for every other."""
    report = REPORT_BUDGET if REPORT_BUDGET in spec.budgets else DEFAULT_BUDGET
    return f"docs/tables/{spec.paper}.md" if budget == report else f"docs/tables/{spec.paper}.{budget}.md"


def main(args) -> int:
    from orchestrator.arguments import apply_outside_code, check_output_file
    from orchestrator.experiment.config import ConfigError
    from pipelines.compare import check_parallel, parse_list

    check_parallel(args.parallel)
    apply_outside_code(args)
    spec = load_table_file(args.config)
    plan = resolve_budget(spec, args.budget, args.config, check_tuned=not args.tune)
    try:
        seeds = parse_list(args.seeds, int) or plan.seeds
    except ValueError:
        raise ConfigError(f"--seeds {args.seeds!r}: expected comma-separated integers, for example 0,1,2") from None
    built = built_methods(spec)
    runs = plan_settings(spec, plan, built, args.overrides, args.config)
    not_built = sorted({row.label for row in spec.rows.values() if row.method not in built})
    results = results_dir(args, spec, plan)
    if args.check:
        return report_check(args, plan, runs, seeds, not_built, results)
    if args.tune:
        return tune_rows(args, spec, plan, built, results)
    out = Path(args.out or default_out(spec, plan.name))
    if args.out is None:
        out.parent.mkdir(parents=True, exist_ok=True)  # docs/tables/ in a fresh clone
    check_output_file(str(out), "--out")
    # --report-only reads the results, writing only the report: it needs neither the lock nor a writable --results
    with nullcontext() if args.report_only else holding_results(results, [r.setting for r in runs if r.variants]):
        if not args.report_only and (problems := preflight(runs, seeds)):
            raise ConfigError("; ".join(problems))  # before any run, not after the first settings' hours
        if not args.report_only:
            print(table_estimate(plan, runs, seeds, args.parallel, saved_seeds(runs, results)), file=sys.stderr)
        comps = run_settings(runs, seeds, results, args.address, args.parallel,
                             echo=lambda s: print(s, file=sys.stderr), report_only=args.report_only,
                             progress=not args.quiet, plan=plan)
    cells = table_cells(spec, plan, built, comps)
    report = render_report(spec, replace(plan, seeds=seeds), cells, built,
                           {r.setting: r.base for r in runs}, reproduce_command(args, default_out(spec, plan.name)),
                           args.config, args.overrides, reported_seconds(runs, comps, results))
    out.write_text(report)
    print(report)
    print(f"wrote {out}")
    return 0


@contextmanager
def holding_results(results: Path, subdirs: list[str]) -> Iterator[None]:
    """`results` and its `subdirs` (where each setting's comparison or the tuning writes) checked, and `results`
    held by this command for the block: one line, before anything runs, where either fails
    (orchestrator/io/output_lock.py)."""
    from orchestrator.io.output_lock import check_output_dir, holding_output

    check_output_dir(results, "--results")
    for subdir in subdirs:
        check_output_dir(results / subdir, "--results")
    with holding_output(results, "--results"):
        yield


def tune_rows(args, spec: TableFile, plan: BudgetPlan, built: set[str], results: Path) -> int:
    """--tune: one sweep per row that tunes, in the tuning setting of the budget (the digits budget's `tuning:`, or
    the budget's own), its studies under `results`; the choices written as each sweep ends."""
    from orchestrator.experiment.config import ConfigError
    from pipelines.table_tuning import kept_rows, rows_to_tune, tune

    own = plan.name == DEFAULT_BUDGET or spec.budgets[plan.name].tuning is not None
    if not own:
        raise ConfigError(f"--tune --budget {plan.name}: that budget has no `tuning:` of its own (it runs "
                          + ("the digits budget's tuned values: drop --budget" if spec.budgets[plan.name].tuned else
                             "the rows' own values") + "); budgets that tune: "
                          + ", ".join([DEFAULT_BUDGET] * (spec.tuning is not None)
                                      + [n for n, b in spec.budgets.items() if b.tuning is not None]))
    tuning = spec.tuning_of(plan.name)
    if tuning is None:
        raise ConfigError(f"{args.config}: --tune needs a `tuning:` block (setting, trials, validation_fraction, "
                          "overrides): see docs/tables/README.md")
    check_studies_current(spec, args.overrides, results, plan.name)
    # tuned from the file's own values: the earlier choices are not the starting point of the new search
    untuned = replace(plan, tuned={})
    run = setting_run(spec, untuned, tuning.setting, rows_to_tune(spec, built), args.overrides, args.config)
    kept = kept_rows(spec, run, plan.name, args.overrides, args.retune)
    print(tuning_estimate(spec, plan, run, tuning, args.parallel, kept), file=sys.stderr)
    with holding_results(results, ["tuning"]):
        if problems := preflight([run], [tuning.seed]):
            raise ConfigError("; ".join(problems))
        out = tune(spec, run, args.config, results, args.address, args.parallel,
                   echo=lambda s: print(s, file=sys.stderr), cli_overrides=args.overrides, budget=plan.name, retune=args.retune)
    print(f"wrote {out}")
    return 0


def check_studies_current(spec: TableFile, overrides: list[str], results: Path, budget: str = DEFAULT_BUDGET) -> None:
    """--tune resumes the rows' studies: where the tuned values came from another tuning (or other --set) than
    this one, their studies scored trials that way, and resuming would mix the two. More trials alone is what a
    resume is for; anything else is refused while those studies are there."""
    from orchestrator.experiment.config import ConfigError

    state = spec.tuned_state(budget)
    drift = {k: v for k, v in state.drift.items() if k != "trials"}
    if state.rows and state.set != list(overrides):
        drift["set"] = (f"its trials ran with --set {' '.join(state.set) or '(none)'}, this --tune with "
                        f"{' '.join(overrides) or '(none)'}")
    studies = results / "tuning" / "optuna.db"
    if drift and studies.exists():
        raise ConfigError(f"--tune: the tuned values' {'; '.join(drift.values())}, and the studies in {studies} "
                          "scored their trials that way: remove that file to tune afresh (or tune as before)")


# ------------------------------------------------------------------------------------------ estimates
def saved_seeds(runs: list[SettingRun], results: Path) -> dict[str, dict[str, list[int]]]:
    """setting → row → the seeds whose runs are saved for its current config (run_setting will not run them)."""
    out = {}
    for run in runs:
        prints = {row: fingerprint(run.base, v) for row, v in run.variants.items()}
        out[run.setting] = {row: list(by_seed) for row, by_seed in saved_runs(results / run.setting, prints).items()}
    return out


def minutes(seconds: float) -> str:
    if seconds < 600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def run_seconds(plan: BudgetPlan, row_id: str, rounds: int, setting: str = "") -> float | None:
    """One run's measured cost at this budget (None: the budget has no figure for the row)."""
    seconds = plan.timing.of(row_id, setting) if plan.timing else None
    return None if seconds is None else plan.timing.start_seconds + rounds * seconds


def table_estimate(plan: BudgetPlan, runs: list[SettingRun], seeds: list[int], parallel: int | None,
                   saved: dict[str, dict[str, list[int]]]) -> str:
    """One line: the runs left and, from the budget's measured seconds a round, about how long they take."""
    left = runs_left(runs, seeds, saved)
    done = sum(len(r.variants) for r in runs) * len(seeds) - len(left)
    head = f"{len(left)} runs to go" + (f" ({done} saved, not run again)" if done else "")
    total = table_seconds(plan, left, parallel)
    if total is None:
        return (f"estimate: {head}; budget {plan.name} has no measured seconds a round (`timing:`), so the time "
                "is estimated after the first setting")
    at = parallel or plan.timing.parallel
    return f"estimate: {head}, about {minutes(total)} at {at} at a time (measured: {plan.timing.measured})"


def runs_left(runs: list[SettingRun], seeds: list[int], saved: dict[str, dict[str, list[int]]]) -> list[tuple]:
    """(setting, row, rounds) of every run not saved yet."""
    return [(r.setting, row, v.get("train.rounds", r.base.train.rounds))
            for r in runs for row, v in r.variants.items()
            for seed in seeds if seed not in saved.get(r.setting, {}).get(row, [])]


def table_seconds(plan: BudgetPlan, left: list[tuple], parallel: int | None) -> float | None:
    """The wall seconds of these runs from the budget's measured figures, `parallel` (or the timing's) at a
    time; None without figures."""
    if plan.timing is None:
        return None
    return sum(run_seconds(plan, row, rounds, setting) for setting, row, rounds in left) / \
        (parallel or plan.timing.parallel)


def tuning_estimate(spec: TableFile, plan: BudgetPlan, run: SettingRun, tuning, parallel: int | None,
                    kept: set[str] = frozenset()) -> str:
    """One line: the trials the tuning has left (the rows in `kept` and the trials the tuned-values file carries
    from an interrupted row are done) and, from the budget's measured seconds a round, at most how long they take
    (pruned trials stop early; a widened range tunes a row again)."""
    from orchestrator.experiment.config import with_overrides
    from pipelines.table_tuning import search_space, trials_recorded

    trials, seconds, rows = 0, 0.0, 0
    for row_id, variant in run.variants.items():
        grid = spec.rows[row_id].tune_grid
        n = math.prod(len(v) for v in grid.values()) if grid else tuning.trials
        if not search_space(spec, row_id) or row_id in kept:
            continue
        n = max(0, n - trials_recorded(spec, plan.name, row_id))
        rounds = with_overrides(run.base, {**variant, **tuning.overrides}).train.rounds
        trials, rows = trials + n, rows + 1
        cost = run_seconds(plan, row_id, rounds, run.setting)
        seconds = None if cost is None or seconds is None else seconds + n * cost
    head = f"tuning: {rows} rows, {trials} trials in {tuning.setting}" + (
        f" ({len(kept)} {'row' if len(kept) == 1 else 'rows'} already tuned, kept)" if kept else "")
    if not trials:
        return head
    if seconds is None or plan.timing is None:
        return f"{head}; budget {plan.name} has no measured seconds a round (`timing:`) to estimate the time from"
    at = parallel or (plan.timing.parallel if plan.timing else 1)
    return (f"{head}, at most about {minutes(seconds / at)} at {at} at a time before any widening (measured: "
            f"{plan.timing.measured})")


def results_dir(args, spec: TableFile, plan: BudgetPlan) -> Path:
    """Where each setting's comparison is saved: --results, else results/tables/<paper>/<budget>."""
    return Path(args.results or f"results/tables/{spec.paper}/{plan.name}")


def report_check(args, plan: BudgetPlan, runs: list[SettingRun], seeds: list[int], not_built: list[str],
                 results: Path) -> int:
    """--check: every cell's config is valid (plan_settings raised otherwise), and every run starts: its data,
    partitions and method (preflight); the rows not built and the columns not expressible are listed, and the
    estimate counts only the runs not saved under `results`."""
    from orchestrator.experiment.config import ConfigError

    cells = sum(len(r.variants) for r in runs)
    print(f"{args.config}: valid; budget {plan.name}: {len(runs)} settings, {cells} setting × row configs")
    print("not built: " + (", ".join(not_built) if not_built else "none"))
    unexpressed = [f"{c.table.id}/{c.column.name}" for c in plan.columns if c.setting is None]
    print("not expressible: " + (", ".join(unexpressed) if unexpressed else "none"))
    problems = preflight(runs, seeds)
    if problems:
        raise ConfigError("; ".join(problems))
    print(f"budget {plan.name}: the data are on disk, every seed's partition can be drawn and every built "
          "method starts on them")
    print(table_estimate(plan, runs, seeds, args.parallel, saved_seeds(runs, results)))
    return 0
