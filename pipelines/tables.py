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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pipelines.claims import saved_comparison, scale_of
from pipelines.compare import Comparison, aggregate_metric
from pipelines.table_config import (
    ALGORITHM_SLOT,
    DEFAULT_BUDGET,
    BudgetPlan,
    ColumnPlan,
    TableFile,
    load_table_file,
    resolve_budget,
)
from pipelines.table_report import Cell, CellState, measured, render_report


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
@dataclass(frozen=True)
class SettingRun:
    """One compare: a setting's base config and its variants (row id → overrides)."""

    setting: str
    base: Any  # ExperimentConfig
    variants: dict[str, dict[str, Any]]


def rows_to_run(plan: BudgetPlan, setting: str, built: set[str], spec: TableFile) -> list[str]:
    """The built rows with a paper number in some column that this setting reproduces, in the file's order."""
    wanted = {row for c in plan.columns if c.setting == setting
              for row, cells in c.table.paper.items() if c.table.numbers(row)[c.index].value is not None}
    return [r for r in spec.rows if r in wanted and spec.rows[r].method in built]


def variant_overrides(spec: TableFile, row_id: str, setting: str, plan: BudgetPlan,
                      cli: dict[str, Any]) -> dict[str, Any]:
    """A row's overrides in a setting: its method and hyperparameters, the setting's keys that name each row's
    method ({algorithm}), the row's own overrides and those it has for this setting, then the command line's
    (which win)."""
    row = spec.rows[row_id]
    out: dict[str, Any] = {"algorithm.name": row.method}
    if row.params:
        out[f"algorithm.{row.method}"] = dict(row.params)
    out |= {k.replace(ALGORITHM_SLOT, row.method): v for k, v in plan.settings[setting].items() if ALGORITHM_SLOT in k}
    return out | row.overrides | row.per_setting.get(setting, {}) | cli


def plan_settings(spec: TableFile, plan: BudgetPlan, built: set[str], cli_overrides: list[str],
                  source: str) -> list[SettingRun]:
    """Every setting a column of the budget uses, with its base config and its rows, each config validated."""
    from orchestrator.config import (
        ConfigError,
        apply_overrides,
        build_config,
        parse_override,
        set_dotted,
        with_overrides,
    )

    cli = {".".join(path): value for path, value in map(parse_override, cli_overrides)}
    runs = []
    for setting in dict.fromkeys(c.setting for c in plan.columns if c.setting is not None):
        raw = copy.deepcopy(plan.experiment)
        for key, value in plan.settings[setting].items():
            if ALGORITHM_SLOT not in key:
                set_dotted(raw, key, value)
        raw["name"] = f"{spec.paper}-{plan.name}-{setting}"
        base = build_config(apply_overrides(raw, list(cli_overrides)), f"{source}: setting {setting}")
        variants = {r: variant_overrides(spec, r, setting, plan, cli)
                    for r in rows_to_run(plan, setting, built, spec)}
        for row_id, overrides in variants.items():
            try:
                with_overrides(base, overrides)
            except ConfigError as e:
                raise ConfigError(f"{source}: setting {setting}, row {row_id}: {e}") from None
        runs.append(SettingRun(setting, base, variants))
    return runs


# ----------------------------------------------------------------------------------------------- running
def run_settings(runs: list[SettingRun], seeds: list[int], results: Path, address: str | None,
                 parallel: int | None, echo=print, report_only: bool = False) -> dict[str, Comparison]:
    """One compare per setting (or, with report_only, the histories an earlier run saved under `results`)."""
    from pipelines.compare import compare

    comps = {}
    for run in runs:
        if report_only or not run.variants:
            comps[run.setting] = saved_comparison(results / run.setting) if report_only and run.variants \
                else Comparison()
            continue
        echo(f"{run.setting}: {', '.join(run.variants)} × seeds {', '.join(map(str, seeds))}")
        comps[run.setting] = compare(run.base, run.variants, seeds, results / run.setting, address=address,
                                     parallel=parallel, echo=echo)
    return comps


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
    histories = comps[c.setting].histories.get(row_id, {})
    values = [aggregate_metric(h, c.metric) for h in histories.values()]
    spreads = [aggregate_metric(h, c.column.spread_metric) for h in histories.values()] \
        if c.column.spread_metric else []
    m = measured(values, spreads, scale_of(c.metric))
    return Cell(paper, CellState.NO_METRIC) if m is None else Cell(paper, CellState.MEASURED, m)


# -------------------------------------------------------------------------------------------- checking
def check_start(runs: list[SettingRun]) -> list[str]:
    """What a run of each setting needs before it trains: its dataset's files (one problem per dataset, naming
    the directory and the files expected), its output directories, and its method and global model built on the
    data's shape. Returns the problems, each one line; nothing is trained or written."""
    from orchestrator.config import ConfigError, with_overrides
    from orchestrator.run_dir import check_output_dirs
    from tasks.data.datasets import DataFileError, DatasetNotFound, load_dataset

    problems: dict[str, str] = {}
    datasets: dict[str, Any] = {}  # one load per data spec
    for run in runs:
        for overrides in run.variants.values():
            cfg = with_overrides(run.base, overrides)
            key = cfg.data.model_dump_json()
            try:
                check_output_dirs(cfg)
                if key not in datasets:
                    datasets[key] = load_dataset(cfg.data.model_copy(update={"split_seed": cfg.split_seed}))
            except (DatasetNotFound, DataFileError, ConfigError) as e:
                problems.setdefault(str(e), f"{run.setting}: {e}")
                continue
            start_method(cfg, datasets[key])
    return list(problems.values())


def start_method(cfg, data) -> None:
    """The method and its global state, built on the data's shape as a run's first step builds them."""
    from orchestrator.methods import build_algorithm

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
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the report from the histories saved under --results, running nothing")


def reproduce_command(args) -> str:
    parts = ["mooring table", args.config]
    if args.budget != DEFAULT_BUDGET:
        parts.append(f"--budget {args.budget}")
    if args.seeds:
        parts.append(f"--seeds {args.seeds}")
    parts += [f"--set {o}" for o in args.overrides]
    return " ".join(parts)


def default_out(spec: TableFile, budget: str) -> str:
    return f"docs/tables/{spec.paper}.md" if budget == DEFAULT_BUDGET else f"docs/tables/{spec.paper}.{budget}.md"


def main(args) -> int:
    from orchestrator.config import ConfigError
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
        return report_check(args, spec, plan, runs, not_built)
    results = Path(args.results or f"results/tables/{spec.paper}/{plan.name}")
    comps = run_settings(runs, seeds, results, args.address, args.parallel,
                         echo=lambda s: print(s, file=sys.stderr), report_only=args.report_only)
    cells = table_cells(spec, plan, built, comps)
    report = render_report(spec, replace(plan, seeds=seeds), cells, built,
                           {r.setting: r.base for r in runs}, reproduce_command(args), args.config, args.overrides)
    out = Path(args.out or default_out(spec, plan.name))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(report)
    print(f"wrote {out}")
    return 0


def report_check(args, spec: TableFile, plan: BudgetPlan, runs: list[SettingRun], not_built: list[str]) -> int:
    """--check: every cell's config is valid (already, or plan_settings raised); at another budget than the
    digits one, the data and each method's start are checked too."""
    from orchestrator.config import ConfigError

    cells = sum(len(r.variants) for r in runs)
    print(f"{args.config}: valid; budget {plan.name}: {len(runs)} settings, {cells} setting × row configs checked")
    print("not built: " + (", ".join(not_built) if not_built else "none"))
    unexpressed = [f"{c.table.id}/{c.column.name}" for c in plan.columns if c.setting is None]
    print("not expressible: " + (", ".join(unexpressed) if unexpressed else "none"))
    if plan.name != DEFAULT_BUDGET:
        problems = check_start(runs)
        if problems:
            raise ConfigError("; ".join(problems))
        print(f"budget {plan.name}: the data are on disk and every built method starts on them")
    return 0
