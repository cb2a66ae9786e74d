"""A paper's table beside Mooring's: each cell's numbers, Kendall's τ per column, and the markdown report.

Mooring's number in a cell is the mean over seeds of the column's metric with the sample standard deviation
(ddof = 1) beside it; where the paper's ± is not a spread over seeds (FedNH's Table 2: across clients), the
column's `spread_metric` gives Mooring's, as its mean over seeds. Kendall's τ (τ-b, scipy.stats.kendalltau)
compares the order of the rows the paper and Mooring both have a number for, column by column.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from pipelines.table_config import DEFAULT_BUDGET, MIN_TRIALS, BudgetPlan, ColumnPlan, PaperNumber, TableFile


class CellState(Enum):
    MEASURED = "measured"
    NOT_BUILT = "not built"
    NOT_EXPRESSIBLE = "not expressible"
    NO_PAPER_NUMBER = "no paper number"  # not run: nothing to compare with
    NO_METRIC = "no metric"  # run, but the method logs no such metric (a global model for a method without one)
    NO_RUN = "no run"  # no run of the row finished in the column's setting (not run yet, or each failed)


@dataclass(frozen=True)
class Measured:
    """Mooring's number for one cell (already in the paper's unit: % for accuracies)."""

    mean: float
    std: float | None  # sample std over seeds; None with one seed
    spread: float | None  # the spread_metric's mean over seeds, where the column has one
    seeds: int


@dataclass(frozen=True)
class Cell:
    paper: PaperNumber
    state: CellState
    measured: Measured | None = None


def measured(values: list[float | None], spreads: list[float | None], scale: float) -> Measured | None:
    """Mean and sample std (ddof = 1) over the seeds that logged the metric; None when none did."""
    vals = [scale * v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return None
    spread_vals = [scale * s for s in spreads if s is not None and not math.isnan(s)]
    return Measured(float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else None,
                    float(np.mean(spread_vals)) if spread_vals else None, len(vals))


def kendall_tau(paper: list[float], ours: list[float]) -> float | None:
    """Kendall's τ-b between two orderings of the same rows; None when undefined (fewer than 2 rows, or either
    side constant)."""
    if len(paper) != len(ours):
        raise ValueError(f"{len(paper)} paper values against {len(ours)} measured")
    if len(paper) < 2:
        return None
    from scipy.stats import kendalltau

    tau = kendalltau(paper, ours).statistic
    return None if tau is None or math.isnan(tau) else float(tau)


def column_tau(column: ColumnPlan, cells: dict[str, Cell]) -> tuple[float | None, int]:
    """τ over the rows with both numbers (by the column's rank_by), and how many rows that is."""
    by_spread = column.column.rank_by == "spread"
    pairs = []
    for cell in cells.values():
        if cell.state is not CellState.MEASURED:
            continue
        paper = cell.paper.spread if by_spread else cell.paper.value
        ours = cell.measured.spread if by_spread else cell.measured.mean
        if paper is not None and ours is not None:
            pairs.append((paper, ours))
    return kendall_tau([p for p, _ in pairs], [o for _, o in pairs]), len(pairs)


# ------------------------------------------------------------------------------------------- markdown
def format_measured(m: Measured) -> str:
    if m.spread is not None:
        return f"{m.mean:.2f} ± {m.spread:.2f}"
    return f"{m.mean:.2f}" if m.std is None else f"{m.mean:.2f} ± {m.std:.2f}"


def format_cell(cell: Cell) -> str:
    """"paper / Mooring": the paper's text as printed, then Mooring's number or why there is none."""
    paper = cell.paper.text or "–"
    if cell.state is CellState.MEASURED:
        return f"{paper} / **{format_measured(cell.measured)}**"
    ours = {CellState.NOT_BUILT: "not built", CellState.NOT_EXPRESSIBLE: "–",
            CellState.NO_PAPER_NUMBER: "–", CellState.NO_METRIC: "no metric",
            CellState.NO_RUN: "no run finished"}[cell.state]
    return f"{paper} / {ours}"


def format_tau(tau: float | None, n: int) -> str:
    return f"n/a ({n} rows)" if tau is None else f"{tau:+.2f} ({n} rows)"


def escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_table(spec: TableFile, table_id: str, columns: list[ColumnPlan],
                 cells: dict[tuple[str, int], dict[str, Cell]]) -> list[str]:
    """One paper table: a row per method, each cell "paper / Mooring", then Kendall's τ per column."""
    table = next(t for t in spec.tables if t.id == table_id)
    cols = [c for c in columns if c.table.id == table_id]
    lines = [f"### {table.title}", "",
             "| method | " + " | ".join(escape(c.column.name) for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for row_id in table.paper:
        row_cells = [format_cell(cells[(table_id, c.index)][row_id]) for c in cols]
        lines.append(f"| {escape(spec.rows[row_id].label)} | " + " | ".join(row_cells) + " |")
    taus = [format_tau(*column_tau(c, cells[(table_id, c.index)])) if c.setting else "–" for c in cols]
    lines.append("| Kendall's τ | " + " | ".join(taus) + " |")
    lines += ["", *column_notes(cols)]
    if table.notes:
        lines += ["", table.notes.strip()]
    return lines + [""]


def column_notes(cols: list[ColumnPlan]) -> list[str]:
    """How each column is reproduced, columns sharing a setting and metric (or a reason) named together."""
    groups: dict[str, list[str]] = {}
    for c in cols:
        if c.setting is None:
            how = f"not expressible: {c.reason}"
        else:
            spread = f", ± = `{c.column.spread_metric}`" if c.column.spread_metric else ""
            rank = ", τ on the ±" if c.column.rank_by == "spread" else ""
            how = f"setting `{c.setting}`, metric `{c.metric}`{spread}{rank}"
        groups.setdefault(how, []).append(c.column.name)
    return [f"- {', '.join(names)}: {how}" for how, names in groups.items()]


def render_report(spec: TableFile, plan: BudgetPlan, cells: dict[tuple[str, int], dict[str, Cell]],
                  built: set[str], configs: dict, command: str, config_path: str,
                  extra_overrides: list[str]) -> str:
    """docs/tables/<paper>.md: the budget, each table, the rows not built, the rows' hyperparameters, how to
    reproduce."""
    lines = [f"# {spec.title}", "",
             f"Written by `mooring table` from `{config_path}`. Numbers: {spec.source}. Each cell reads "
             "**paper / Mooring**: the paper's number as printed, then Mooring's mean ± sample std over seeds "
             "(% for accuracies), unless the column says its ± is another spread. Kendall's τ (τ-b) compares the "
             "order of the rows both have a number for. Measured numbers are not the paper's protocol unless the "
             "budget says so: compare orders, not values.", "",
             "## Budget", "", *budget_lines(plan, configs, extra_overrides), *tuning_lines(spec, plan), "",
             "## Reproduce", "", "```bash", command, "```", ""]
    for table in spec.tables:
        lines += render_table(spec, table.id, plan.columns, cells)
    lines += ["## Rows", "", "| row | method | hyperparameters | tuned by | state |", "|---|---|---|---|---|"]
    states = row_states(spec, built, cells)
    for row_id, row in spec.rows.items():
        lines.append(f"| {escape(row.label)} | `{row.method}` | {escape(row_settings(row_id, row, plan))} | "
                     f"{escape(tuned_by(row_id, row, plan))} | "
                     f"{states[row_id]} |")
    not_built = [spec.rows[r].label for r, s in states.items() if s == CellState.NOT_BUILT.value]
    lines += ["", "Not built: " + (", ".join(not_built) if not_built else "none") + "."]
    if plan.notes:
        lines += ["", "## Notes", "", plan.notes.strip()]
    return "\n".join(lines) + "\n"


def budget_lines(plan: BudgetPlan, configs: dict, extra_overrides: list[str]) -> list[str]:
    """The budget as run: per setting, its dataset, model, clients, participation, rounds and local work."""
    lines = [f"- budget `{plan.name}`: {plan.description}; seeds {', '.join(map(str, plan.seeds))}"]
    for setting, cfg in configs.items():
        t = cfg.train
        work = f"{t.local_steps} local steps" if t.local_steps else f"{t.local_epochs} local epochs"
        share = f"{t.clients_per_round} clients" if t.clients_per_round else f"fraction {t.fraction:g}"
        lines.append(f"- `{setting}`: {cfg.data.dataset}, model `{cfg.model.name}`, {cfg.data.num_clients} clients "
                     f"({share} a round), {t.rounds} rounds, {work}, batch {t.batch_size}")
    if extra_overrides:
        lines.append("- changed on the command line, for every run: " + ", ".join(f"`{o}`" for o in extra_overrides))
    return lines


def listed(values: dict) -> str:
    return ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in values.items())


def tuning_lines(spec: TableFile, plan: BudgetPlan) -> list[str]:
    """How the tuned rows were tuned (the budget's tuning), where any are: trials, pruning, the setting whose
    validation split scored them and why, and the widening of a range whose bound a choice lay at."""
    t = plan.tuning
    if not plan.tuned or t is None:
        return []
    rounds = t.overrides.get("train.rounds", plan.experiment.get("train", {}).get("rounds"))
    budget = ", ".join(f"{k} = {v}" for k, v in t.overrides.items()) or "the setting's own budget"
    option = "" if plan.name == DEFAULT_BUDGET or plan.name not in spec.budgets or spec.budgets[plan.name].tuning \
        is None else f" --budget {plan.name}"
    where = f"`{t.setting}`" + (f" ({t.why})" if t.why else "")
    startup, warmup = math.ceil(t.trials / 3), math.ceil(rounds / 3) if isinstance(rounds, int) else None
    used = spec.tuned_state(spec.tuned_by_budget(plan.name) or DEFAULT_BUDGET).set
    lines = [f"- tuned rows (`mooring table{option} --tune`): {t.trials} Optuna trials a row (TPE, its first "
             f"{startup} random, the row's own values first; a row with the paper's grid tries all of it, unpruned) "
             f"at {budget}, seed {t.seed}, each scored on the validation split of {where}, "
             f"{t.validation_fraction:.0%} of each client's training samples (no trial reads a test set); the values "
             "chosen there run in every column. A trial below the median of the completed ones at the same round "
             f"stops there, but not before {startup} trials have completed"
             + (f", nor in a trial's first {warmup} rounds" if warmup else "")
             + f"; a choice at a bound of its range widens that range and tunes the row again (at most {t.widen} "
             "times), and one still at a bound is flagged below"
             + ("; the trials ran with " + ", ".join(f"`--set {o}`" for o in used) if used else "")]
    if t.trials < MIN_TRIALS:
        lines.append(f"- **{t.trials} trials a row, fewer than {MIN_TRIALS}**: a quick tuning, not one to tell "
                     "the methods apart by")
    return lines


def row_settings(row_id: str, row, plan: BudgetPlan) -> str:
    """A row's hyperparameters (tuned ones included), its own overrides, and those it has in this budget's
    settings."""
    params = row.params | (plan.tuned[row_id].params if row_id in plan.tuned else {})
    parts = [listed(params) or "the method's defaults"]
    if row.overrides:
        parts.append(listed(row.overrides))
    parts += [f"in `{s}`: {listed(v)}" for s, v in row.per_setting.items() if s in plan.settings]
    return "; ".join(parts)


def tuned_by(row_id: str, row, plan: BudgetPlan) -> str:
    """Where a row's values come from: the file's `tuned_by`, or the sweep `--tune` ran for it, with its trials
    completed and pruned, whether the choice moved from the row's own values, and any value still at a bound."""
    if row_id not in plan.tuned:
        return row.tuned_by
    t = plan.tuned[row_id]
    searched = ", ".join(f"{k} in {v}" + (f" (widened from {t.widened[k]})" if k in t.widened else "")
                         for k, v in t.searched.items())
    counts = (f" ({t.completed} completed, {t.pruned} pruned)" if t.completed is not None
              else " (completed and pruned not recorded)")
    how = "the paper's grid in full" if t.grid else f"{t.trials} trials{counts}"
    text = (f"`--tune`: {how} over {searched} on a validation split (study {t.study}, {t.date}); "
            f"best validation {t.metric} {t.best_validation:.4g}")
    if t.grid and t.completed is not None:
        text += f"; {t.completed} of its points completed"
    if t.start is not None and t.moved is not None:
        own = listed(t.start) or "none in range"
        text += f"; moved from its own values ({own})" if t.moved else \
            f"; **kept its own values** ({own}): no other trial scored higher on validation"
    if not t.grid and t.trials < MIN_TRIALS:
        text += f"; **only {t.trials} trials** (fewer than {MIN_TRIALS})"
    if t.at_bound:
        text += "; **at a bound of its range**: " + ", ".join(
            f"{k} = {t.params[k]:.4g} at the {side} end" if isinstance(t.params.get(k), float)
            else f"{k} = {t.params.get(k)} at the {side} end" for k, side in t.at_bound.items()) \
            + (" after widening" if t.widened else "")
    return text


def row_states(spec: TableFile, built: set[str], cells: dict[tuple[str, int], dict[str, Cell]]) -> dict[str, str]:
    """Each row's state: not built (its method is not registered), built and measured in some cell, or built and
    measured in none (no column it has a number in is expressible, or it logs none of their metrics)."""
    measured_rows = {r for column in cells.values() for r, cell in column.items() if cell.state is CellState.MEASURED}
    return {row_id: (CellState.NOT_BUILT.value if row.method not in built else
                     "built" if row_id in measured_rows else "built, nothing measured")
            for row_id, row in spec.rows.items()}
