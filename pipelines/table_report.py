"""A paper's table beside Mooring's, read as statistics: each cell's mean and 95 % interval over seeds, each
column's rows in tiers, the share of row pairs it resolves and Kendall's τ, the statements computed from them, and
the markdown report.

Mooring's number in a cell is the mean over seeds of the column's metric (or the rounds its KEY takes to reach the
column's `rounds_to`) with the 95 % t-interval of that mean; where the paper's ± is not a spread over seeds
(FedNH's Table 2: across clients), the column's `spread_metric` gives Mooring's, as its mean over seeds, and with
`rank_by: spread` the interval, the tiers and τ are the spread's. The statistics are pipelines/table_stats.py's:
exact values (ties as ties), two-sided paired t-tests Holm-corrected over a column's pairs, letters for the
tiers, τ-b. The file's `reference` rows are shown but compared with nothing; its `own` rows are marked.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Any

from pipelines import table_stats as st
from pipelines.comparison import metric_scale
from pipelines.table_config import (
    ALGORITHM_SLOT,
    DEFAULT_BUDGET,
    MIN_TRIALS,
    BudgetPlan,
    ColumnPlan,
    PaperNumber,
    TableFile,
)


class CellState(Enum):
    MEASURED = "measured"
    NOT_BUILT = "not built"
    NOT_EXPRESSIBLE = "not expressible"
    NO_PAPER_NUMBER = "no paper number"  # not run: nothing to compare with
    NO_METRIC = "no metric"  # run, but the method logs no such metric (a global model for a method without one)
    NO_RUN = "no run"  # no run of the row finished in the column's setting (not run yet, or each failed)


@dataclass(frozen=True)
class Measured:
    """Mooring's number for one cell. `mean`, `interval` and `spread` are in the paper's unit (% for accuracies);
    `per_seed` is what the column ranks by (the metric, its spread, or rounds), exact, in the metric's own unit."""

    mean: float
    interval: tuple[float, float] | None  # 95 % t-interval of the ranked quantity's mean; None with one seed
    spread: float | None  # the spread_metric's mean over seeds, where the column has one
    per_seed: dict[int, Fraction]
    unreached: int = 0  # rounds_to: seeds that never reached the target (counted as one round past their last)

    @property
    def seeds(self) -> int:
        return len(self.per_seed)

    @property
    def ranked(self) -> Fraction:
        """The exact mean over seeds of what the column ranks by."""
        return st.mean(list(self.per_seed.values()))


@dataclass(frozen=True)
class Cell:
    paper: PaperNumber
    state: CellState
    measured: Measured | None = None


def scale_of(column: ColumnPlan) -> float:
    """Accuracies in %, rounds and other metrics as they are."""
    return 1.0 if column.column.rounds_to is not None else metric_scale(column.metric)


def measure(histories: dict[int, list[dict[str, Any]]], column: ColumnPlan) -> Measured | None:
    """A cell from its row's runs, one history per seed; None when no seed logged the column's metric."""
    scale = scale_of(column)
    if column.column.rounds_to is not None:
        key = column.metric.partition(":")[0]
        reached = {seed: r for seed, h in histories.items() if (r := st.rounds_to(h, key, column.column.rounds_to))}
        if not reached:
            return None
        rounds = {seed: Fraction(r) for seed, (r, _) in reached.items()}
        return Measured(float(st.mean(list(rounds.values()))), interval(rounds, scale), None, rounds,
                        sum(1 for _, ok in reached.values() if not ok))
    values = {seed: v for seed, h in histories.items() if (v := st.exact_metric(h, column.metric)) is not None}
    if not values:
        return None
    spreads = {}
    if column.column.spread_metric:
        spreads = {seed: v for seed, h in histories.items()
                   if (v := st.exact_metric(h, column.column.spread_metric)) is not None}
    ranked = spreads if column.column.rank_by == "spread" else values
    if not ranked:
        return None
    return Measured(scale * float(st.mean(list(values.values()))), interval(ranked, scale),
                    scale * float(st.mean(list(spreads.values()))) if spreads else None, ranked)


def interval(per_seed: dict[int, Fraction], scale: float) -> tuple[float, float] | None:
    return st.t_interval([scale * float(v) for v in per_seed.values()])


# --------------------------------------------------------------------------------------- a column's statistics
@dataclass(frozen=True)
class ColumnStats:
    """One column read as statistics: the rows compared (measured, not reference), best first; their letters;
    every pair's Holm-adjusted p (pair → p); Kendall's τ-b over the compared rows the paper has a number for."""

    order: list[str]
    letters: dict[str, str]
    pvalues: dict[frozenset[str], float | None]  # the paired tests' own p (None: fewer than two common seeds)
    adjusted: dict[frozenset[str], float]
    tau: float | None
    tau_rows: int

    @property
    def resolved(self) -> set[frozenset[str]]:
        return {pair for pair, p in self.adjusted.items() if p <= st.ALPHA}

    def rank(self, row: str, cells: dict[str, Cell]) -> int:
        """1 + the rows strictly better (ties share a rank)."""
        value = cells[row].measured.ranked
        better = self.order.index(row)
        while better > 0 and cells[self.order[better - 1]].measured.ranked == value:
            better -= 1
        return better + 1

    def top(self, row: str) -> bool:
        """Whether the row's difference from the first row is not resolved (or it is the first)."""
        return row == self.order[0] or frozenset((row, self.order[0])) not in self.resolved


def column_stats(column: ColumnPlan, cells: dict[str, Cell], reference: list[str]) -> ColumnStats:
    """The column's measured rows but the reference ones, ordered, tested pairwise, lettered, and τ."""
    compared = [r for r, c in cells.items() if c.state is CellState.MEASURED and r not in reference]
    sign = 1 if column.column.higher_is_better else -1
    order = sorted(compared, key=lambda r: -sign * cells[r].measured.ranked)  # stable: ties in the file's order
    pvalues = {pair: st.paired_p(*(cells[r].measured.per_seed for r in sorted(pair))) for pair in st.pairs_of(order)}
    adjusted = st.holm(pvalues)
    different = {pair for pair, p in adjusted.items() if p <= st.ALPHA}
    by_spread = column.column.rank_by == "spread"
    with_paper = [r for r in order if (cells[r].paper.spread if by_spread else cells[r].paper.value) is not None]
    paper = [cells[r].paper.spread if by_spread else cells[r].paper.value for r in with_paper]
    tau = st.kendall_tau_b(paper, [cells[r].measured.ranked for r in with_paper])
    return ColumnStats(order, st.letters(order, different), pvalues, adjusted, tau, len(with_paper))


def kendall_tau(paper: list, ours: list) -> float | None:
    """Kendall's τ-b between two orderings of the same rows (pipelines/table_stats.py kendall_tau_b)."""
    return st.kendall_tau_b(paper, ours)


# ------------------------------------------------------------------------------------------- markdown
def number(value: float) -> str:
    return f"{value:.2f}"


def format_measured(m: Measured, letters: str | None, reference: bool = False) -> str:
    """"**mean** [low, high] `tier`", or "**mean ± spread** [interval of the spread]"; one seed: no interval."""
    main = f"**{number(m.mean)}**" if m.spread is None else f"**{number(m.mean)} ± {number(m.spread)}**"
    if m.unreached:
        main = "≥ " + main
    text = main + (" (1 seed)" if m.interval is None else f" [{number(m.interval[0])}, {number(m.interval[1])}]")
    if m.unreached:
        text += f" ({m.unreached} of {m.seeds} seeds never reached it)"
    return text + (f" `{letters}`" if letters else " (reference)" if reference else "")


def format_cell(cell: Cell, letters: str | None = None, reference: bool = False) -> str:
    """"paper / Mooring": the paper's text as printed, then Mooring's number or why there is none."""
    paper = cell.paper.text or "–"
    if cell.state is CellState.MEASURED:
        return f"{paper} / {format_measured(cell.measured, letters, reference)}"
    ours = {CellState.NOT_BUILT: "not built", CellState.NOT_EXPRESSIBLE: "–",
            CellState.NO_PAPER_NUMBER: "–", CellState.NO_METRIC: "no metric",
            CellState.NO_RUN: "no run finished"}[cell.state]
    return f"{paper} / {ours}"


def format_tau(tau: float | None, n: int) -> str:
    return f"n/a ({n} rows)" if tau is None else f"{tau:+.2f} ({n} rows)"


def format_resolved(stats: ColumnStats) -> str:
    pairs = len(stats.adjusted)
    if pairs == 0:
        return "no pairs"
    return f"{len(stats.resolved)} of {pairs} pairs ({100 * len(stats.resolved) / pairs:.0f} %)"


def format_tier(stats: ColumnStats, row: str) -> str:
    if row not in stats.letters:
        return "–"
    where = "first" if row == stats.order[0] else "top tier" if stats.top(row) else "below the top tier"
    return f"`{stats.letters[row]}` {where}"


def escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_table(spec: TableFile, table_id: str, columns: list[ColumnPlan],
                 cells: dict[tuple[str, int], dict[str, Cell]]) -> list[str]:
    """One paper table: a row per method, each cell "paper / Mooring" with its tier, then per column Kendall's τ
    beside the share of pairs resolved and the own method's tier; how each column is reproduced, the statements
    computed from the results, and the table's own notes."""
    table = next(t for t in spec.tables if t.id == table_id)
    cols = [c for c in columns if c.table.id == table_id]
    stats = {c.index: column_stats(c, cells[(table_id, c.index)], spec.reference) for c in cols if c.setting}
    lines = [f"### {table.title}", "",
             "| method | " + " | ".join(escape(c.column.name) for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for row_id in table.paper:
        row_cells = [format_cell(cells[(table_id, c.index)][row_id],
                                 stats[c.index].letters.get(row_id) if c.index in stats else None,
                                 row_id in spec.reference) for c in cols]
        lines.append(f"| {escape(spec.rows[row_id].label)} | " + " | ".join(row_cells) + " |")
    footer = [f"{format_tau(stats[c.index].tau, stats[c.index].tau_rows)} · {format_resolved(stats[c.index])}"
              if c.index in stats else "–" for c in cols]
    lines.append("| Kendall's τ · pairs resolved | " + " | ".join(footer) + " |")
    for own in (r for r in spec.own if r in table.paper):
        tiers = [format_tier(stats[c.index], own) if c.index in stats else "–" for c in cols]
        lines.append(f"| tier of {escape(spec.rows[own].label)} (the paper's method) | " + " | ".join(tiers) + " |")
    lines += ["", *column_notes(cols)]
    found = statements(spec, cols, cells, stats)
    if found:
        lines += ["", "Computed from the results:", "", *found]
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
            rank = ", interval, tiers and τ on the ±" if c.column.rank_by == "spread" else ""
            what = (f"rounds until `{c.metric.partition(':')[0]}` ≥ {c.column.rounds_to:g}"
                    if c.column.rounds_to is not None else f"metric `{c.metric}`")
            better = "" if c.column.higher_is_better else ", lower is better"
            how = f"setting `{c.setting}`, {what}{spread}{rank}{better}"
        groups.setdefault(how, []).append(c.column.name)
    return [f"- {', '.join(names)}: {how}" for how, names in groups.items()]


# ------------------------------------------------------------------------------- statements from the results
def unit(column: ColumnPlan) -> str:
    if column.column.rounds_to is not None:
        return " rounds"
    return " points" if scale_of(column) == 100.0 else ""


def ranked_value(cell: Cell, column: ColumnPlan) -> float:
    """The ranked quantity's mean in the paper's unit, as its cell prints it."""
    m = cell.measured
    return m.spread if column.column.rank_by == "spread" else m.mean


def paired(a: Measured, b: Measured, scale: float) -> tuple[float, tuple[float, float] | None, int]:
    """a − b over the seeds both have: the mean difference, its 95 % t-interval, the number of seeds."""
    seeds = sorted(set(a.per_seed) & set(b.per_seed))
    diffs = [scale * float(a.per_seed[s] - b.per_seed[s]) for s in seeds]
    return (sum(diffs) / len(diffs) if diffs else 0.0), st.t_interval(diffs), len(seeds)


def signed(x: float) -> str:
    return f"{x:+.2f}"


def p_text(stats: ColumnStats, a: str, b: str) -> str:
    pair = frozenset((a, b))
    if stats.pvalues[pair] is None:
        return "not tested: fewer than two seeds in common"
    p = stats.adjusted[pair]
    return f"Holm p {p:.3f}, " + ("resolved" if p <= st.ALPHA else "not resolved")


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def statements(spec: TableFile, cols: list[ColumnPlan], cells: dict[tuple[str, int], dict[str, Cell]],
               stats: dict[int, ColumnStats]) -> list[str]:
    """Every number, rank and order the notes state, computed: per distinct condition (columns that share a
    setting, a metric and their rows counted once) its first row, each own row's rank, tier and difference from
    the runner-up or the leader and from the baseline, the pairs resolved and the span of the rows; then, for each
    own row, in how many conditions it is first, in the top tier and better than the baseline."""
    groups: dict[tuple, list[ColumnPlan]] = {}
    for c in cols:
        s = stats.get(c.index)
        if s is None or len(s.order) < 2:
            continue
        key = (c.setting, c.metric, c.column.spread_metric, c.column.rank_by, c.column.rounds_to,
               c.column.higher_is_better, tuple(s.order))
        groups.setdefault(key, []).append(c)
    lines, tally = [], {own: [0, 0, 0, 0, 0] for own in spec.own}  # first, top tier, better, resolved, conditions
    for group in groups.values():
        c = group[0]
        s, col_cells = stats[c.index], cells[(c.table.id, c.index)]
        lines.append(f"- {', '.join(g.column.name for g in group)}: " + condition(spec, c, s, col_cells, tally))
    for own, (first, top, better, resolved, n) in tally.items():
        if n == 0:
            continue
        line = (f"- {spec.rows[own].label}: first in {first} of {n} conditions, in the top tier in {top} of {n}")
        if spec.baseline is not None:
            line += f"; better than {spec.rows[spec.baseline].label} in {better} of {n}, resolved in {resolved}"
        lines.append(line + " (columns sharing a setting and metric counted once).")
    return lines


def condition(spec: TableFile, c: ColumnPlan, s: ColumnStats, col_cells: dict[str, Cell],
              tally: dict[str, list[int]]) -> str:
    """One condition's statement (see `statements`)."""
    label = {r: spec.rows[r].label for r in s.order}
    value = {r: ranked_value(col_cells[r], c) for r in s.order}
    scale, u = scale_of(c), unit(c)

    def against(a: str, b: str) -> tuple[float, tuple[float, float] | None, int, str]:
        d, ci, n = paired(col_cells[a].measured, col_cells[b].measured, scale)
        return d, ci, n, p_text(s, a, b)

    firsts = [r for r in s.order if s.rank(r, col_cells) == 1]
    parts = []
    if len(firsts) > 1:
        parts.append(" and ".join(label[r] for r in firsts) + f" tie first ({number(value[firsts[0]])})")
    elif firsts[0] not in spec.own:
        parts.append(f"{label[firsts[0]]} is first ({number(value[firsts[0]])})")
    for own in (r for r in spec.own if r in s.order):
        rank = s.rank(own, col_cells)
        if rank == 1 and len(firsts) == 1:
            other = s.order[1]
            d, _, _, p = against(own, other)
            text = (f"{label[own]} is first ({number(value[own])}), tier `{s.letters[own]}`, ahead of {label[other]} "
                    f"by {signed(d)}{u} ({p})")
        elif rank == 1:
            other, text = None, f"{label[own]}, tied first, tier `{s.letters[own]}`"
        else:
            other = s.order[0]
            d, _, _, p = against(own, other)
            text = (f"{label[own]} is {ordinal(rank)} of {len(s.order)} ({number(value[own])}), tier "
                    f"`{s.letters[own]}`, {signed(d)}{u} from {label[other]} ({p})")
        tally[own][0] += rank == 1
        tally[own][1] += s.top(own)
        tally[own][4] += 1
        base = spec.baseline
        if base is not None and base in s.order:
            mine, theirs = col_cells[own].measured.ranked, col_cells[base].measured.ranked
            better = mine != theirs and (mine > theirs) == c.column.higher_is_better
            tally[own][2] += better
            tally[own][3] += better and frozenset((own, base)) in s.resolved
            if base != other:
                d, ci, n, p = against(own, base)
                ci_text = "" if ci is None else f", uncorrected 95 % interval [{signed(ci[0])}, {signed(ci[1])}]"
                text += f"; {label[own]} − {label[base]}: {signed(d)}{u} over {n} seeds{ci_text} ({p})"
        parts.append(text)
    low, high = min(value.values()), max(value.values())
    parts.append(f"{format_resolved(s)} resolved; the rows span {number(low)} to {number(high)}")
    return "; ".join(parts) + "."


# ------------------------------------------------------------------------------------------------ report
def render_report(spec: TableFile, plan: BudgetPlan, cells: dict[tuple[str, int], dict[str, Cell]],
                  built: set[str], configs: dict, command: str, config_path: str,
                  extra_overrides: list[str], seconds: list[float | None]) -> str:
    """docs/tables/<paper>.md: the budget, each table, the rows not built, the rows' hyperparameters, how to
    reproduce."""
    lines = [f"# {spec.title}", "",
             f"Written by `mooring table` from `{config_path}`. Numbers: {spec.source}. Each cell reads "
             "**paper / Mooring**: the paper's number as printed, then Mooring's mean over seeds (% for "
             "accuracies; where a column says its ± is another spread, that spread's mean) with the 95 % "
             "t-interval of the mean in brackets (mean ± t(0.975, n − 1) · s / √n; \"1 seed\": no interval), then "
             "its tier: within a column, every pair of rows is compared by a two-sided paired t-test over the seeds "
             "both have (a Wilcoxon test cannot reach p < 0.05 on five seeds), the p-values Holm-corrected over "
             "the column's pairs at 0.05, and rows that share a letter are not resolved from each other (`a` holds "
             "the best row). Values are compared exactly: each logged accuracy is read back as the count over the "
             "test set it is, so rows with equal counts tie. Kendall's τ (τ-b, ties as ties) compares the order of "
             "the rows both have a number for, beside the share of row pairs the column resolves"
             + (f"; reference rows ({', '.join(spec.rows[r].label for r in spec.reference)}) are left out of "
                "both" if spec.reference else "")
             + ". Every number, rank and order stated under a table is computed from these results. Measured "
             "numbers are not the paper's protocol unless the budget says so: compare orders, not values.", "",
             "## Budget", "", *budget_lines(plan, configs, extra_overrides), wall_line(seconds),
             *tuning_lines(spec, plan), "",
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
        families = sorted({str(v) for k, v in plan.settings.get(setting, {}).items()
                           if ALGORITHM_SLOT in k and k.endswith(".family")})
        model = (f"each method's clients from the `{', '.join(families)}` model family" if families
                 else f"model `{cfg.model.name}`")
        lines.append(f"- `{setting}`: {cfg.data.dataset}, {model}, {cfg.data.num_clients} clients "
                     f"({share} a round), {t.rounds} rounds, {work}, batch {t.batch_size}")
    if extra_overrides:
        lines.append("- changed on the command line, for every run: " + ", ".join(f"`{o}`" for o in extra_overrides))
    return lines


def wall_line(seconds: list[float | None]) -> str:
    """The reported runs' wall time: their own seconds added up (start-up included), and those saved without."""
    timed = [s for s in seconds if s is not None]
    if not timed:
        return f"- wall time: {len(seconds)} runs, saved without their wall time"
    line = (f"- wall time: {len(timed)} runs took {sum(timed) / 60:.0f} minutes of runs added up, "
            f"{sum(timed) / len(timed):.0f} s a run on average (each run's own wall time, its start-up included)")
    untimed = len(seconds) - len(timed)
    return line + ("" if not untimed else "; 1 run saved without its time" if untimed == 1
                   else f"; {untimed} runs saved without theirs")


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
