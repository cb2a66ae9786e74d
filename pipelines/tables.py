"""`mooring table`: a paper's results tables, every cell run by Mooring, written beside the paper's numbers.

    mooring table configs/tables/fedfm.yaml                 # the digits budget → docs/tables/fedfm.md
    mooring table configs/tables/fedfm.yaml --check         # validate every cell's config, run nothing
    mooring table configs/tables/fedfm.yaml --budget paper --check   # the paper's protocol: configs, data, start

Each setting of the budget is one `compare` (pipelines/compare.py) of the rows that have a paper number in one of
its columns, on the same partitions and seeds; a row whose method is not registered is "not built", never run.
The file's schema is pipelines/table_config.py; the report, pipelines/table_report.py.
"""
from __future__ import annotations

import copy
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipelines.claims import saved_comparison
from pipelines.comparison import Comparison
from pipelines.table_config import (
    ALGORITHM_SLOT,
    DEFAULT_BUDGET,
    BudgetPlan,
    ColumnPlan,
    SettingRun,
    TableFile,
    load_table_file,
    resolve_budget,
)
from pipelines.table_report import Cell, CellState, measure, render_report


def built_methods(spec: TableFile) -> set[str]:
    """The rows' methods that are registered now."""
    from tasks.algorithms import ALGORITHMS
    from tasks.registry import RegistryError

    built = set()
    for row in spec.rows.values():
        try:
            ALGORITHMS.find(row.method)
        except RegistryError:
            continue
        built.add(row.method)
    return built


# ---------------------------------------------------------------------------------------------- planning
def rows_to_run(plan: BudgetPlan, setting: str, built: set[str], spec: TableFile) -> list[str]:
    """The built rows with a paper number in some column that this setting reproduces, in the file's order."""
    wanted = {row for c in plan.columns if c.setting == setting
              for row in c.table.paper if c.table.numbers(row)[c.index].value is not None}
    return [r for r in spec.rows if r in wanted and spec.rows[r].method in built]


def variant_overrides(spec: TableFile, row_id: str, setting: str, plan: BudgetPlan,
                      cli: dict[str, Any]) -> dict[str, Any]:
    """A row's overrides in a setting: its method and hyperparameters, the setting's keys that name each row's
    method ({algorithm}), the row's own overrides and those it has for this setting, then the command line's
    (which win)."""
    row = spec.rows[row_id]
    out: dict[str, Any] = {"algorithm.name": row.method}
    params = row.params | (plan.tuned[row_id].params if row_id in plan.tuned else {})
    # one dotted key per hyperparameter: a block given as one dict would be the very object later keys write into
    out |= {f"algorithm.{row.method}.{key}": copy.deepcopy(value) for key, value in params.items()}
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
            set_dotted(raw, key, copy.deepcopy(value))  # never the file's own dict: --set writes into it
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
                 progress: bool = True) -> dict[str, Comparison]:
    """One compare per setting (or, with report_only, the histories an earlier run saved under `results`)."""
    from pipelines.compare import compare

    comps = {}
    for run in runs:
        if not run.variants:
            comps[run.setting] = Comparison()
            continue
        if report_only:
            comps[run.setting] = saved(results / run.setting)
            continue
        echo(f"{run.setting}: {', '.join(run.variants)} × seeds {', '.join(map(str, seeds))}")
        comps[run.setting] = compare(run.base, run.variants, seeds, results / run.setting, address=address,
                                     parallel=parallel, echo=echo, progress=progress)
    return comps


def saved(setting_dir: Path) -> Comparison:
    """The histories a previous run of this setting saved, or one line saying there are none."""
    from orchestrator.experiment.config import ConfigError

    if not (setting_dir / "histories.json").exists():
        raise ConfigError(f"--report-only: no saved results at {setting_dir / 'histories.json'}; run the table "
                          "first (or give its --results)")
    return saved_comparison(setting_dir)


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
    if paper.value is None:
        return Cell(paper, CellState.NO_PAPER_NUMBER)
    if spec.rows[row_id].method not in built:
        return Cell(paper, CellState.NOT_BUILT)
    m = measure(comps[c.setting].histories.get(row_id, {}), c)
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
        from orchestrator.experiment.config import ConfigError
        from orchestrator.io.run_dir import check_output_dirs
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
                        help=f"{DEFAULT_BUDGET} (default): the spec's small-scale protocol; paper: the paper's own "
                             "datasets, models, clients and rounds (the file's budgets)")
    parser.add_argument("--check", action="store_true",
                        help="validate every cell's config and list the rows not built, running nothing; with "
                             "--budget paper also that the data are on disk and each method starts on them")
    parser.add_argument("--out", default=None, metavar="MARKDOWN",
                        help="report to write (default: docs/tables/<paper>.md; <paper>.<budget>.md for another "
                             "budget)")
    parser.add_argument("--results", default=None, metavar="DIR",
                        help="directory for each setting's comparison (default: results/tables/<paper>/<budget>)")
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
                        help="tune every row's hyperparameters on a validation split (the file's `tuning:`, one "
                             "sweep per row; resumes an interrupted one) and write them to the tuned-values file, "
                             "running no cell; the next run of the table uses them")


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
    return f"docs/tables/{spec.paper}.md" if budget == DEFAULT_BUDGET else f"docs/tables/{spec.paper}.{budget}.md"


def main(args) -> int:
    from orchestrator.commands.common import check_output_file
    from orchestrator.experiment.config import ConfigError
    from pipelines.compare import parse_list

    spec = load_table_file(args.config)
    plan = resolve_budget(spec, args.budget, args.config)
    try:
        seeds = parse_list(args.seeds, int) or plan.seeds
    except ValueError:
        raise ConfigError(f"--seeds {args.seeds!r}: expected comma-separated integers, for example 0,1,2") from None
    built = built_methods(spec)
    runs = plan_settings(spec, plan, built, args.overrides, args.config)
    not_built = sorted({row.label for row in spec.rows.values() if row.method not in built})
    if args.check:
        return report_check(args, plan, runs, seeds, not_built)
    if args.tune:
        return tune_rows(args, spec, plan, built)
    out = Path(args.out or default_out(spec, plan.name))
    if args.out is None:
        out.parent.mkdir(parents=True, exist_ok=True)  # docs/tables/ in a fresh clone
    check_output_file(str(out), "--out")
    if not args.report_only and (problems := preflight(runs, seeds)):
        raise ConfigError("; ".join(problems))  # before any run, not after the first settings' hours
    results = Path(args.results or f"results/tables/{spec.paper}/{plan.name}")
    comps = run_settings(runs, seeds, results, args.address, args.parallel,
                         echo=lambda s: print(s, file=sys.stderr), report_only=args.report_only,
                         progress=not args.quiet)
    cells = table_cells(spec, plan, built, comps)
    report = render_report(spec, replace(plan, seeds=seeds), cells, built,
                           {r.setting: r.base for r in runs}, reproduce_command(args, default_out(spec, plan.name)),
                           args.config, args.overrides)
    out.write_text(report)
    print(report)
    print(f"wrote {out}")
    return 0


def tune_rows(args, spec: TableFile, plan: BudgetPlan, built: set[str]) -> int:
    """--tune: one sweep per row that tunes, in the tuning setting; the choices written as each sweep ends."""
    from orchestrator.experiment.config import ConfigError
    from pipelines.table_tuning import rows_to_tune, tune

    if spec.tuning is None:
        raise ConfigError(f"{args.config}: --tune needs a `tuning:` block (setting, trials, validation_fraction, "
                          "overrides): see docs/tables/README.md")
    if plan.name != DEFAULT_BUDGET:
        raise ConfigError(f"--tune tunes the {DEFAULT_BUDGET} budget, whose validation splits choose the values; "
                          f"drop --budget {args.budget}")
    # tuned from the file's own values: the earlier choices are not the starting point of the new search
    untuned = replace(plan, tuned={})
    run = setting_run(spec, untuned, spec.tuning.setting, rows_to_tune(spec, built), args.overrides, args.config)
    if problems := preflight([run], [spec.tuning.seed]):
        raise ConfigError("; ".join(problems))
    results = Path(args.results or f"results/tables/{spec.paper}/{plan.name}")
    out = tune(spec, run, args.config, results, args.address, args.parallel, echo=lambda s: print(s, file=sys.stderr))
    print(f"wrote {out}")
    return 0


def report_check(args, plan: BudgetPlan, runs: list[SettingRun], seeds: list[int], not_built: list[str]) -> int:
    """--check: every cell's config is valid (plan_settings raised otherwise), and every run starts: its data,
    partitions and method (preflight); the rows not built and the columns not expressible are listed."""
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
    return 0
