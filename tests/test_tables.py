"""`mooring table`: the table files validate, Kendall's τ and the report match hand computations on tiny tables,
bad input is one line, the paper budget says what data to put where and starts each method, and one tiny table
runs end to end through the real compare."""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import yaml

from orchestrator.cli import main as mooring
from pipelines.comparison import Comparison
from pipelines.table_config import (
    DEFAULT_BUDGET,
    Column,
    ColumnPlan,
    TableFile,
    load_table_file,
    paper_number,
    resolve_budget,
)
from pipelines.table_report import (
    Cell,
    CellState,
    column_stats,
    format_cell,
    format_resolved,
    kendall_tau,
    measure,
    render_report,
    render_table,
    statements,
)
from pipelines.table_stats import exact, exact_metric, holm, letters, rounds_to
from pipelines.tables import built_methods, column_cell, plan_settings, reproduce_command, table_cells

ROOT = Path(__file__).resolve().parents[1]
# the table files; a <paper>.tuned.yaml beside one is its tuned values, validated with it (load_table_file)
TABLE_FILES = sorted(p for p in (ROOT / "configs" / "tables").glob("*.yaml") if not p.name.endswith(".tuned.yaml"))

# the shape of every paper table (rows × columns) as docs/methods/<paper>.md §7/§8 prints it
PAPER_SHAPES = {
    ("fedfm", "table3"): (8, 9), ("fedfm", "table4"): (8, 7),
    ("fedfa", "table2"): (8, 9), ("fedfa", "table1"): (8, 5),
    ("feddebias", "table1"): (9, 6), ("feddebias", "table3"): (5, 6), ("feddebias", "table10"): (9, 6),
    ("feddebias", "table11"): (9, 6),
    ("fednh", "table1"): (10, 18), ("fednh", "table2"): (9, 3),
    ("fedsa", "table1"): (8, 6), ("fedsa", "table2"): (8, 4), ("fedsa", "table3"): (8, 3),
    ("bucketing", "table1"): (10, 2), ("bucketing", "table2"): (10, 2), ("bucketing", "attacks"): (8, 5),
}


# ------------------------------------------------------------------------------ hand computations
def test_kendall_tau_by_hand():
    # one discordant pair of six: (5 − 1) / 6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # a tie in the paper's column: τ-b = (C − D) / √((n0 − n1)(n0 − n2)) = 2 / √(2 · 3)
    assert kendall_tau([1, 2, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    assert kendall_tau([70.0], [80.0]) is None  # one row: no order
    assert kendall_tau([1, 2, 3], [5, 5, 5]) is None  # Mooring's side constant: undefined


def test_logged_accuracies_are_read_back_as_their_counts():
    assert exact(5199 / 5400) == Fraction(5199, 5400)
    assert exact(1 / 3) == Fraction(1, 3)
    # the mean of three test sets' accuracies (1, 2 and 3 of 10 correct), summed in two orders: two floats, one value
    accs = [1 / 10, 2 / 10, 3 / 10]
    assert sum(accs) / 3 != sum(reversed(accs)) / 3
    assert exact(sum(accs) / 3) == exact(sum(reversed(accs)) / 3) == Fraction(6, 30)
    history = [{"round": r + 1, "accuracy": a} for r, a in enumerate([0.5, 0.6, 0.7, 0.8, 0.9, 0.3])]
    assert exact_metric(history, "accuracy:last5") == Fraction(33, 50)  # (0.6 + 0.7 + 0.8 + 0.9 + 0.3) / 5
    assert exact_metric(history, "accuracy:top5") == Fraction(7, 10)
    assert exact_metric(history, "accuracy:final") == Fraction(3, 10)
    assert exact_metric(history, "accuracy:best") == Fraction(9, 10)
    assert exact_metric(history, "loss:final") is None


def test_rounds_to_a_target_from_the_history():
    # evaluated every other round: the rounds without an accuracy are skipped, the round numbers kept
    history = [{"round": 1}, {"round": 2, "accuracy": 0.45}, {"round": 3}, {"round": 4, "accuracy": 0.5},
               {"round": 5}, {"round": 6, "accuracy": 0.4}]
    assert rounds_to(history, "accuracy", 0.5) == (4, True)  # reached at ≥, not >
    assert rounds_to(history, "accuracy", 0.6) == (7, False)  # never: one round past the last
    assert rounds_to(history, "loss", 0.5) is None
    column = ColumnPlan(None, Column(name="r", setting="s", rounds_to=0.5), 0, "s", None, "accuracy:top5")
    m = measure({0: history, 1: [{"round": 1, "accuracy": 0.2}, {"round": 2, "accuracy": 0.3}]}, column)
    assert m.per_seed == {0: Fraction(4), 1: Fraction(3)} and m.unreached == 1 and m.mean == 3.5
    half = T975[1] * math.sqrt(0.5) / math.sqrt(2)  # s = √0.5 for (4, 3)
    assert m.interval == pytest.approx((3.5 - half, 3.5 + half))
    assert format_cell(Cell(paper_number("120"), CellState.MEASURED, m), "a") == (
        f"120 / ≥ **3.50** [{3.5 - half:.2f}, {3.5 + half:.2f}] (1 of 2 seeds never reached it) `a`")
    assert not column.column.higher_is_better


def test_a_budget_counts_a_rounds_to_column_to_its_own_target():
    raw = tiny_spec()
    raw["tables"][0]["columns"][1] = {"name": "cost", "rounds_to": 0.8, "not_expressible": "a cost"}
    raw["budgets"] = {"b": {"description": "b", "settings": {"s": {}}, "columns": {"t1/acc": "s", "t1/cost": "s"},
                            "rounds_to": {"t1/cost": 0.5}},
                      "c": {"description": "c", "settings": {"s": {}}, "columns": {"t1/cost": "s"}}}
    spec = TableFile(**raw)
    history = {0: [{"round": 1, "accuracy": 0.4}, {"round": 2, "accuracy": 0.6}]}
    at_b, at_c = (resolve_budget(spec, b, "tiny.yaml").columns[1] for b in ("b", "c"))
    assert (at_b.column.rounds_to, at_c.column.rounds_to) == (0.5, 0.8)
    assert measure(history, at_b).per_seed == {0: Fraction(2)} and measure(history, at_b).unreached == 0
    assert measure(history, at_c).per_seed == {0: Fraction(3)} and measure(history, at_c).unreached == 1
    assert spec.tables[0].columns[1].rounds_to == 0.8  # the file's column untouched


def test_feddebias_counts_the_papers_threshold_at_its_protocol_and_its_own_at_mnist():
    path = str(ROOT / "configs" / "tables" / "feddebias.yaml")
    spec = load_table_file(path)
    rounds = {b: {f"{c.table.id}/{c.column.name}": c.column.rounds_to for c in resolve_budget(spec, b, path).columns
                  if c.setting is not None and c.column.rounds_to is not None} for b in ("mnist", "smoke", "paper")}
    names = {"table1/Rounds for 80%", "table3/Rounds for 80%", "table10/RotatedMNIST Rounds (Speed up)"}
    assert rounds["paper"] == dict.fromkeys(names, 0.8)
    assert rounds["mnist"] == rounds["smoke"] == dict.fromkeys(names, 0.35)
    assert {c.setting for c in resolve_budget(spec, DEFAULT_BUDGET, path).columns if c.column.rounds_to} == {None}
    worst = next(c for c in resolve_budget(spec, "mnist", path).columns if c.table.id == "table11" and c.setting)
    assert worst.metric == "accuracy_worst:top5"
    # Table 1's "FedDebias + Mixup" and Table 3's ablations are FedDebias with its switches
    params = {r: spec.rows[r].params for r in ("feddebias_mixup", "component1", "component2", "component2_no_max")}
    assert params["feddebias_mixup"]["mixup"] is True and params["component1"]["use_contrastive"] is False
    assert params["component2"]["use_pseudo"] is False and params["component2_no_max"]["max_step"] is False
    assert {spec.rows[r].method for r in params} == {"feddebias"} and set(spec.own) == {"feddebias", "feddebias_mixup"}


T975 = {1: 12.706204736174707, 2: 4.302652729749464, 4: 2.7764451051977987}  # t(0.975, n − 1), from tables


def test_a_cells_number_is_the_mean_with_its_95_percent_t_interval():
    column = ColumnPlan(None, Column(name="acc", setting="s"), 0, "s", None, "accuracy:final")
    m = measure({0: [{"accuracy": 0.80}], 1: [{"accuracy": 0.82}], 2: [{"accuracy": 0.84}], 3: [{}]}, column)
    half = T975[2] * 2.0 / math.sqrt(3)  # s = 2 points over the three seeds that logged it
    assert (m.mean, m.seeds) == (pytest.approx(82.0), 3)
    assert m.interval == pytest.approx((82.0 - half, 82.0 + half))
    assert format_cell(Cell(paper_number("80.1"), CellState.MEASURED, m), "ab") == \
        f"80.1 / **82.00** [{82 - half:.2f}, {82 + half:.2f}] `ab`"
    one = measure({0: [{"accuracy": 0.5}]}, column)
    assert one.interval is None and format_cell(Cell(paper_number("1"), CellState.MEASURED, one)) == \
        "1 / **50.00** (1 seed)"
    assert measure({0: [{"accuracy": float("nan")}]}, column) is None
    spread = ColumnPlan(None, Column(name="pm", setting="s", spread_metric="std:final", rank_by="spread"), 0, "s",
                        None, "personalized_x:final")
    m = measure({0: [{"personalized_x": 0.8, "std": 0.1}], 1: [{"personalized_x": 0.6, "std": 0.3}]}, spread)
    half = T975[1] * math.sqrt(200.0) / math.sqrt(2)  # on the spread: 10 and 30, s = √200
    assert (m.mean, m.spread) == (pytest.approx(70.0), pytest.approx(20.0))
    assert m.interval == pytest.approx((20.0 - half, 20.0 + half))  # the interval is the ranked spread's
    assert not spread.column.higher_is_better  # a spread across clients: smaller is fairer


def test_holm_by_hand():
    adjusted = holm({"x": 0.01, "y": 0.04, "z": 0.03, "w": None})
    # sorted 0.01, 0.03, 0.04, 1 (undefined); × 4, 3, 2, 1 → 0.04, 0.09, 0.08, 1, made non-decreasing
    assert adjusted == pytest.approx({"x": 0.04, "z": 0.09, "y": 0.09, "w": 1.0})


def test_compact_letters_by_hand():
    # A > B > C > D; resolved: A–C, A–D, B–D. Groups no two of which differ: {A, B}, {B, C}, {C, D}
    different = {frozenset("AC"), frozenset("AD"), frozenset("BD")}
    assert letters(list("ABCD"), different) == {"A": "a", "B": "ab", "C": "bc", "D": "c"}
    assert letters(list("ABC"), set()) == {"A": "a", "B": "a", "C": "a"}
    assert letters(list("ABC"), {frozenset("AB"), frozenset("AC"), frozenset("BC")}) == {"A": "a", "B": "b", "C": "c"}


def two_sided_p(diffs: list[float]) -> float:
    """The paired t-test by hand: t = mean / (s / √n), p = 2 P(T > |t|) with n − 1 degrees of freedom."""
    from scipy.stats import t

    n, mean = len(diffs), sum(diffs) / len(diffs)
    s = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    return 2 * t.sf(abs(mean / (s / math.sqrt(n))), n - 1)


# five seeds of three rows, correct predictions out of 100 test images
COUNTS = {"a": [90, 91, 92, 93, 94], "b": [80, 82, 81, 84, 83], "c": [89, 91, 92, 92, 95]}


def column_of(counts: dict[str, list[int]], paper: dict[str, str], **column) -> tuple[ColumnPlan, dict[str, Cell]]:
    plan = ColumnPlan(None, Column(name="acc", setting="s", **column), 0, "s", None, "accuracy:final")
    cells = {row: Cell(paper_number(paper[row]), CellState.MEASURED,
                       measure({seed: [{"accuracy": n / 100}] for seed, n in enumerate(ns)}, plan))
             for row, ns in counts.items()}
    return plan, cells


def test_a_columns_tiers_by_hand():
    plan, cells = column_of(COUNTS, {"a": "70", "b": "60", "c": "65"})
    stats = column_stats(plan, cells, [])
    assert stats.order == ["a", "c", "b"]  # means 92, 91.8, 82
    p = {pair: two_sided_p([x - y for x, y in zip(COUNTS[pair[0]], COUNTS[pair[1]])])
         for pair in (("a", "b"), ("a", "c"), ("c", "b"))}
    assert p["a", "b"] < p["c", "b"] < 0.05 / 2 and p["a", "c"] > 0.05  # diffs 10 9 11 9 11; −9 −9 −11 −8 −12
    assert stats.adjusted == pytest.approx({frozenset("ab"): 3 * p["a", "b"], frozenset("bc"): 2 * p["c", "b"],
                                            frozenset("ac"): p["a", "c"]})
    assert stats.letters == {"a": "a", "c": "a", "b": "b"}
    assert format_resolved(stats) == "2 of 3 pairs (67 %)"
    assert stats.tau == 1.0  # the paper's a > c > b (70, 65, 60), as here
    lower, cells_lower = column_of(COUNTS, {"a": "70", "b": "60", "c": "65"}, better="lower")
    assert column_stats(lower, cells_lower, []).order == ["b", "c", "a"]


def test_ties_in_counts_are_ties_in_tau_and_tiers():
    """Three rows with the same counts in every seed, their floats apart by summation noise, and a fourth above:
    τ-b counts the three pairs among them as ties, and no test separates them."""
    noisy = {"a": [0.1 + 0.2, 0.7], "b": [0.3, 0.7], "c": [0.15 * 2, 0.7]}
    assert len({v[0] for v in noisy.values()}) > 1  # the floats differ
    plan = ColumnPlan(None, Column(name="acc", setting="s"), 0, "s", None, "accuracy:final")
    cells = {row: Cell(paper_number(paper), CellState.MEASURED,
                       measure({seed: [{"accuracy": v}] for seed, v in enumerate(values)}, plan))
             for row, values, paper in (("a", noisy["a"], "70"), ("b", noisy["b"], "69"), ("c", noisy["c"], "68"),
                                        ("d", [0.4, 0.8], "71"))}
    stats = column_stats(plan, cells, [])
    # n0 = 6 pairs, none tied in the paper, 3 tied here; the 3 pairs with d concordant: 3 / √(6 · 3)
    assert stats.tau == pytest.approx(3 / math.sqrt(18))
    assert stats.order == ["d", "a", "b", "c"]  # the tied rows in the file's order
    assert stats.pvalues[frozenset("ab")] == stats.pvalues[frozenset("bc")] == 1.0  # equal in every seed
    assert stats.pvalues[frozenset("ad")] == 0.0  # 10 points in both seeds: the t-test's limit
    assert stats.rank("c", cells) == 2 and stats.rank("d", cells) == 1


def test_reference_rows_are_shown_but_compared_with_nothing():
    plan, cells = column_of(COUNTS | {"r": [99, 99, 98, 99, 99]}, {"a": "70", "b": "60", "c": "65", "r": "90"})
    stats = column_stats(plan, cells, ["r"])
    assert "r" not in stats.order and stats.tau_rows == 3 and len(stats.adjusted) == 3
    assert format_cell(cells["r"], stats.letters.get("r"), reference=True).endswith("[98.24, 99.36] (reference)")


def test_the_statements_are_computed_from_the_column():
    spec = TableFile(**tiny_spec(own=["b"], baseline="a", rows={
        "a": {"label": "A", "method": "fedavg", "tuned_by": "none"},
        "b": {"label": "B", "method": "fedprox", "tuned_by": "none"},
        "c": {"label": "C", "method": "moon", "tuned_by": "none"}},
        tables=[{"id": "t1", "title": "T", "paper": {"a": ["70", "71"], "b": ["60", "61"], "c": ["65", "66"]},
                 "columns": [{"name": "x", "setting": "s"}, {"name": "y", "setting": "s"}]}]))
    plan = resolve_budget(spec, DEFAULT_BUDGET, "tiny.yaml")
    history = {row: {seed: [{"accuracy": n / 100}] for seed, n in enumerate(ns)} for row, ns in COUNTS.items()}
    cells = table_cells(spec, plan, built_methods(spec), {"s": Comparison(histories=history)})
    stats = {c.index: column_stats(c, cells[("t1", c.index)], []) for c in plan.columns}
    p_ab = 3 * two_sided_p([y - x for x, y in zip(COUNTS["a"], COUNTS["b"])])
    # B is third of three, 10 points under A (the first, and the baseline: said once)
    assert statements(spec, plan.columns, cells, stats) == [
        f"- x, y: A is first (92.00); B is 3rd of 3 (82.00), tier `b`, -10.00 points from A (Holm p {p_ab:.3f}, "
        "resolved); 2 of 3 pairs (67 %) resolved; the rows span 82.00 to 92.00.",
        "- B: first in 0 of 1 conditions, in the top tier in 0 of 1; better than A in 0 of 1, resolved in 0 "
        "(columns sharing a setting and metric counted once)."]
    text = "\n".join(render_table(spec, "t1", plan.columns, cells))
    assert "| Kendall's τ · pairs resolved | +1.00 (3 rows) · 2 of 3 pairs (67 %) | +1.00 (3 rows) · 2 of 3 " \
           "pairs (67 %) |" in text
    assert "| tier of B (the paper's method) | `b` below the top tier | `b` below the top tier |" in text


def test_the_statements_name_the_own_rows_lead_and_its_gap_to_the_baseline():
    spec = TableFile(**tiny_spec(own=["a"], baseline="b", rows={
        "a": {"label": "A", "method": "fedavg", "tuned_by": "none"},
        "b": {"label": "B", "method": "fedprox", "tuned_by": "none"},
        "c": {"label": "C", "method": "moon", "tuned_by": "none"}},
        tables=[{"id": "t1", "title": "T", "paper": {"a": ["70"], "b": ["60"], "c": ["65"]},
                 "columns": [{"name": "x", "setting": "s"}]}]))
    plan = resolve_budget(spec, DEFAULT_BUDGET, "tiny.yaml")
    history = {row: {seed: [{"accuracy": n / 100}] for seed, n in enumerate(ns)} for row, ns in COUNTS.items()}
    cells = table_cells(spec, plan, built_methods(spec), {"s": Comparison(histories=history)})
    stats = {0: column_stats(plan.columns[0], cells[("t1", 0)], [])}
    p_ac, p_ab = two_sided_p([x - y for x, y in zip(COUNTS["a"], COUNTS["c"])]), 3 * two_sided_p(
        [x - y for x, y in zip(COUNTS["a"], COUNTS["b"])])
    half = T975[4] * 1.0 / math.sqrt(5)  # A − B: 10 9 11 9 11, s = 1
    assert statements(spec, plan.columns, cells, stats)[0] == (
        f"- x: A is first (92.00), tier `a`, ahead of C by +0.20 points (Holm p {p_ac:.3f}, not resolved); "
        f"A − B: +10.00 points over 5 seeds, uncorrected 95 % interval [{10 - half:+.2f}, {10 + half:+.2f}] (Holm p "
        f"{p_ab:.3f}, resolved); 2 of 3 pairs (67 %) resolved; the rows span 82.00 to 92.00.")


@pytest.mark.parametrize(("text", "value", "spread"), [
    ("66.69±0.69", 66.69, 0.69), ("84.08 ± 6.80", 84.08, 6.80), ("82.66(2.83)", 82.66, 2.83),
    ("11,182", 11182.0, None), ("828 (1.0X)", 828.0, None), ("22.90 ± 0.30 (†)", 22.90, 0.30),
    ("—", None, None), ("", None, None), (82.47, 82.47, None)])
def test_paper_numbers_are_read_as_printed(text, value, spread):
    number = paper_number(text)
    assert (number.value, number.spread, number.text) == (value, spread, str(text).strip())


def tiny_spec(**changes) -> dict:
    """Two built rows and one not built, one column run and one not expressible."""
    raw = {
        "paper": "tiny", "title": "Tiny", "source": "by hand", "metric": "accuracy:final", "seeds": [0, 1],
        "experiment": {"name": "tiny", "data": {"num_clients": 4}, "train": {"rounds": 2}},
        "settings": {"s": {"data.partition.alpha": 0.5}},
        "rows": {"a": {"label": "A", "method": "fedavg", "tuned_by": "none"},
                 "b": {"label": "B", "method": "fedprox", "params": {"mu": 0.1}, "tuned_by": "the paper"},
                 "c": {"label": "C", "method": "no_such_method_yet", "tuned_by": "later"}},
        "tables": [{"id": "t1", "title": "Table 1", "paper": {"a": ["70.0±1.0", "5"], "b": ["60.0", "6"],
                                                              "c": ["65.0", "—"]},
                    "columns": [{"name": "acc", "setting": "s"}, {"name": "cost", "not_expressible": "a cost"}]}],
    }
    return raw | changes


def test_the_report_by_hand():
    spec = TableFile(**tiny_spec())
    plan = resolve_budget(spec, DEFAULT_BUDGET, "tiny.yaml")
    built = built_methods(spec)
    assert built == {"fedavg", "fedprox"}
    runs = plan_settings(spec, plan, built, [], "tiny.yaml")
    assert [(r.setting, list(r.variants)) for r in runs] == [("s", ["a", "b"])]
    assert runs[0].variants["b"] == {"algorithm.name": "fedprox", "algorithm.fedprox.mu": 0.1}
    history = {"a": {0: [{"accuracy": 0.5}, {"accuracy": 0.9}], 1: [{"accuracy": 0.8}]},
               "b": {0: [{"accuracy": 0.95}], 1: [{"accuracy": 0.95}]}}
    cells = table_cells(spec, plan, built, {"s": Comparison(histories=history)})
    text = render_report(spec, plan, cells, built, {r.setting: r.base for r in runs}, "mooring table tiny.yaml",
                         "tiny.yaml", [], [30.0, 90.0, 60.0, None])
    assert ("- wall time: 3 runs took 3 minutes of runs added up, 60 s a run on average (each run's own wall time, "
            "its start-up included); 1 run saved without its time") in text
    assert "| method | acc | cost |" in text
    half = T975[1] * math.sqrt(50.0) / math.sqrt(2)  # A: 90 (seed 0's final round) and 80, s = √50
    assert f"| A | 70.0±1.0 / **85.00** [{85 - half:.2f}, {85 + half:.2f}] `a` | 5 / – |" in text
    assert "| B | 60.0 / **95.00** [95.00, 95.00] `a` | 6 / – |" in text  # no spread: a zero-width interval
    assert "| C | 65.0 / not built | — / – |" in text
    # the paper has A above B, Mooring B above A; their one pair is not resolved on two seeds
    assert "| Kendall's τ · pairs resolved | -1.00 (2 rows) · 0 of 1 pairs (0 %) | – |" in text
    assert "Computed from the results:\n\n- acc: B is first (95.00); 0 of 1 pairs (0 %) resolved; the rows span " \
           "85.00 to 95.00." in text  # no own row or baseline in this file: nothing more to say
    assert "- cost: not expressible: a cost" in text
    assert "Not built: C." in text
    assert "| B | `fedprox` | mu = 0.1 | the paper | built |" in text
    assert "| C | `no_such_method_yet` | the method's defaults | later | not built |" in text
    assert "- `s`: digits, model `mlp`, 4 clients (fraction 1 a round), 2 rounds" in text
    assert "mooring table tiny.yaml" in text


def test_a_column_the_paper_only_plots_runs_every_row_it_lists():
    raw = tiny_spec()
    raw["settings"]["f"] = {"data.partition.alpha": 0.1}
    raw["tables"].append({"id": "fig", "title": "a figure", "columns": [{"name": "acc", "setting": "f"}],
                          "paper": {"a": ["–"], "b": ["–"]}})
    spec = TableFile(**raw)
    runs = plan_settings(spec, resolve_budget(spec, DEFAULT_BUDGET, "tiny.yaml"), {"fedavg", "fedprox"}, [], "t")
    assert {r.setting: list(r.variants) for r in runs}["f"] == []  # dashes alone: nothing to compare, no run
    raw["tables"][1]["columns"][0]["figure"] = "Figure 3"
    spec = TableFile(**raw)
    runs = plan_settings(spec, resolve_budget(spec, DEFAULT_BUDGET, "tiny.yaml"), {"fedavg", "fedprox"}, [], "t")
    assert {r.setting: list(r.variants) for r in runs} == {"s": ["a", "b"], "f": ["a", "b"]}
    history = [{"round": 1, "accuracy": 0.5}, {"round": 2, "accuracy": 0.75}]
    comps = {"f": Comparison(histories={"a": {0: history}})}
    column = next(c for c in resolve_budget(spec, DEFAULT_BUDGET, "tiny.yaml").columns if c.table.id == "fig")
    cell = column_cell(spec, column, "a", {"fedavg", "fedprox"}, comps)
    assert cell.state is CellState.MEASURED and cell.paper.value is None  # Mooring's number beside the paper's dash


def test_a_rows_overrides_in_their_order_the_command_line_last():
    raw = tiny_spec(settings={"s": {"data.partition.alpha": 0.5, "algorithm.{algorithm}.mu": 0.2}})
    raw["rows"]["b"] |= {"overrides": {"train.rounds": 3}, "per_setting": {"s": {"algorithm.fedprox.mu": 0.3}}}
    raw["rows"]["a"]["method"] = "fedprox"
    spec = TableFile(**raw)
    plan = resolve_budget(spec, DEFAULT_BUDGET, "tiny.yaml")
    [run] = plan_settings(spec, plan, built_methods(spec), [], "tiny.yaml")
    assert run.base.data.partition.alpha == 0.5  # the setting's own keys go on the base
    assert run.variants["a"] == {"algorithm.name": "fedprox", "algorithm.fedprox.mu": 0.2}  # {algorithm}: its method
    assert run.variants["b"] == {"algorithm.name": "fedprox", "algorithm.fedprox.mu": 0.3,
                                 "train.rounds": 3}  # per_setting after the row's params and the setting's keys
    assert spec.rows["b"].params == {"mu": 0.1}  # the file's values untouched
    [run] = plan_settings(spec, plan, built_methods(spec), ["algorithm.fedprox.mu=0.4"], "tiny.yaml")
    assert run.variants["b"]["algorithm.fedprox.mu"] == 0.4  # --set wins over every row's own values
    assert run.base.algorithm.params_for("fedprox").mu == 0.4


def test_the_reproduce_command_names_the_budget_seeds_overrides_and_the_report_written():
    from argparse import Namespace

    args = Namespace(config="configs/tables/x.yaml", budget="short", seeds="0,1", overrides=["train.rounds=3"],
                     out="docs/tables/x.md")
    assert reproduce_command(args, "docs/tables/x.short.md") == (
        "mooring table configs/tables/x.yaml --budget short --seeds 0,1 --set train.rounds=3 --out docs/tables/x.md")
    args = Namespace(config="configs/tables/x.yaml", budget=DEFAULT_BUDGET, seeds=None, overrides=[], out=None)
    assert reproduce_command(args, "docs/tables/x.md") == "mooring table configs/tables/x.yaml"


# -------------------------------------------------------------------------------------- table files
@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_every_table_file_validates_at_every_budget(path):
    spec = load_table_file(str(path))
    assert spec.paper == path.stem
    shapes = {(spec.paper, t.id): (len(t.paper), len(t.columns)) for t in spec.tables}
    assert shapes == {k: v for k, v in PAPER_SHAPES.items() if k[0] == spec.paper}
    used = {row for t in spec.tables for row in t.paper}
    assert used == set(spec.rows)  # every row is in some table, and no table names a row the file lacks
    for row in spec.rows.values():
        assert row.tuned_by.strip()
    assert spec.own and all(r in spec.rows for r in spec.own)  # the paper's own method is marked
    built = built_methods(spec)
    for budget in [DEFAULT_BUDGET, *spec.budgets]:
        plan = resolve_budget(spec, budget, str(path))
        runs = plan_settings(spec, plan, built, [], str(path))  # every built row's config, params included
        assert all(r.variants for r in runs), f"{budget}: a setting with no row to run"


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_every_table_file_starts_at_its_digits_budget(path, capsys, workdir):
    """--check draws every seed's partition and builds every built method on the data, as a run would start."""
    assert mooring(["table", str(path), "--check", *(a for o in workdir for a in ("--set", o))]) == 0
    assert "every built method starts on them" in capsys.readouterr().out


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_every_table_file_names_the_papers_protocol_as_a_budget(path):
    spec = load_table_file(str(path))
    plan = resolve_budget(spec, "paper", str(path))
    datasets = {cfg.data.dataset for cfg in (r.base for r in plan_settings(spec, plan, set(), [], str(path)))}
    assert datasets and "digits" not in datasets


def write_spec(tmp_path: Path, raw: dict) -> str:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    return str(path)


@pytest.mark.parametrize(("change", "problem"), [
    (lambda r: r["tables"][0]["paper"].update(b=["60.0"]), "table t1: row 'b' has 1 numbers for 2 columns"),
    (lambda r: r["tables"][0]["paper"].update(z=["1", "2"]), "table t1: row 'z' is not in `rows`"),
    (lambda r: r["tables"][0]["paper"].update(b=["sixty", "6"]), "row 'b': 'sixty' is not a number"),
    (lambda r: r["tables"][0]["columns"][0].update(setting="nowhere"), "unknown setting 'nowhere'"),
    (lambda r: r["tables"][0]["columns"][1].update(setting="s"), "give either `setting` or `not_expressible`"),
    (lambda r: r["rows"]["b"]["params"].update(mu=-1), "algorithm.fedprox.mu = -1"),
    (lambda r: r["experiment"]["train"].update(rounds=0), "experiment: train.rounds = 0"),
    (lambda r: r["settings"].update({"a/b": {}}), "setting 'a/b': a setting's name becomes part of its runs' names"),
    (lambda r: r["rows"]["a"].update(per_setting={"t": {}}), "rows.a.per_setting: unknown setting 't'"),
    (lambda r: r.update(own=["z"]), "own: 'z' is not in `rows` (a, b, c)"),
    (lambda r: r.update(own=["a"], reference=["a"]), "own: 'a' is also the baseline or a reference row"),
    (lambda r: r.update(baseline="b", reference=["b"]), "baseline: 'b' is a reference row"),
    (lambda r: r["tables"][0]["columns"][0].update(rounds_to=0.5, spread_metric="x:final", rank_by="spread"),
     "column 'acc': rounds_to counts rounds of the metric, not of its spread"),
    (lambda r: r["tables"][0]["columns"][0].update(better="up"), "columns.0.better = 'up': Input should be 'higher' or 'lower'"),
    (lambda r: r.update(budgets={"b": {"description": "b", "settings": {"s": {}}, "columns": {"t1/acc": "s"},
                                       "rounds_to": {"t1/acc": 0.5}}}),
     "budgets.b.rounds_to: 't1/acc' is not a rounds_to column this budget runs (those it runs: none)"),
])
def test_a_bad_table_file_is_one_line_and_exit_2(tmp_path, capsys, change, problem):
    raw = tiny_spec()
    change(raw)
    assert mooring(["table", write_spec(tmp_path, raw), "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and problem in err and err.count("\n") == 1


@pytest.mark.parametrize(("extra", "problem"), [
    (["--out", "{tmp}"], "--out {tmp}: a directory; give the path of a file"),
    (["--out", "{tmp}/no/such/dir/t.md"], "--out {tmp}/no/such/dir/t.md: directory {tmp}/no/such/dir does not exist"),
    (["--report-only", "--out", "{tmp}/t.md", "--results", "{tmp}/none"],
     "--report-only: no saved results at {tmp}/none/s/histories.json; run the table first"),
])
def test_a_bad_output_or_missing_results_is_one_line_before_any_run(tmp_path, capsys, extra, problem):
    args = [a.format(tmp=tmp_path) for a in extra]
    assert mooring(["table", write_spec(tmp_path, tiny_spec()), *args, "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert problem.format(tmp=tmp_path) in err and err.count("\n") == 1
    assert not (tmp_path / "t.md").exists()


def test_an_unknown_budget_is_one_line(tmp_path, capsys):
    assert mooring(["table", write_spec(tmp_path, tiny_spec()), "--budget", "huge", "--check"]) == 2
    assert "--budget 'huge': not a budget of this file; allowed: digits" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ the paper budget
def test_the_paper_budget_names_what_to_put_where(tmp_path, capsys):
    args = ["table", "configs/tables/fedfm.yaml", "--budget", "paper", "--check", "--set", f"data.root={tmp_path}",
            "--set", f"checkpoint.dir={tmp_path / 'runs'}", "--set", f"data.partitions_dir={tmp_path / 'p'}"]
    assert mooring(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert (f"cifar10: no data in {tmp_path / 'cifar-10-batches-py'}; expected data_batch_1, data_batch_2, "
            "data_batch_3, data_batch_4, data_batch_5, test_batch, batches.meta") in err
    assert f"cifar100: no data in {tmp_path / 'cifar-100-python'}; expected train, test, meta" in err


def write_fake_data(root: Path, per_class: int) -> None:
    """MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 in torchvision's layout: `per_class` random images of every
    class in the training files (CIFAR-100: a fifth of it), a few in the test files."""
    from tests.test_torchvision_sets import cifar_images, write_idx, write_pickle

    for folder in ("MNIST", "FashionMNIST"):
        for prefix, count in (("train", per_class), ("t10k", 2)):
            labels = np.repeat(np.arange(10), count)
            write_idx(root / folder / "raw" / f"{prefix}-images-idx3-ubyte",
                      np.random.default_rng(count).integers(0, 256, size=(len(labels), 28, 28)))
            write_idx(root / folder / "raw" / f"{prefix}-labels-idx1-ubyte", labels)
    labels = [c for c in range(10) for _ in range(per_class)]
    images = cifar_images(10, len(labels))
    for i in range(5):
        write_pickle(root / "cifar-10-batches-py" / f"data_batch_{i + 1}",
                     {"data": images[i::5], "labels": labels[i::5]})
    write_pickle(root / "cifar-10-batches-py" / "test_batch", {"data": cifar_images(11, 10), "labels": list(range(10))})
    write_pickle(root / "cifar-10-batches-py" / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    labels = [c for c in range(100) for _ in range(per_class // 5)]
    write_pickle(root / "cifar-100-python" / "train", {"data": cifar_images(100, len(labels)), "fine_labels": labels,
                                                       "coarse_labels": [c // 5 for c in labels]})
    write_pickle(root / "cifar-100-python" / "test", {"data": cifar_images(101, 100), "fine_labels": list(range(100)),
                                                      "coarse_labels": [c // 5 for c in range(100)]})
    write_pickle(root / "cifar-100-python" / "meta", {"fine_label_names": [f"f{i}" for i in range(100)],
                                                      "coarse_label_names": [f"c{i}" for i in range(20)]})


@pytest.fixture(scope="module")
def data_on_disk(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_fake_data(root, per_class=200)
    return root


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_with_the_data_on_disk_the_paper_budget_starts_every_built_method(path, data_on_disk, tmp_path, capsys):
    spec = load_table_file(str(path))
    # the files hold a twenty-fifth of the real training sets, too few for the Dirichlet draws over 100 clients:
    # 20 clients here (the real sizes draw the paper's federations: the test below); the bucketing paper keeps its
    # 25 workers, which Krum with f = 5 after buckets of 2 needs (2f + 2 < 13 buckets)
    clients = [] if path.stem == "bucketing" else ["--set", "data.num_clients=20"]
    args = ["table", str(path), "--budget", "paper", "--check", "--set", f"data.root={data_on_disk}",
            "--set", f"checkpoint.dir={tmp_path / 'runs'}", "--set", f"data.partitions_dir={tmp_path / 'p'}",
            *clients]
    assert mooring(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "budget paper: the data are on disk, every seed's partition can be drawn and every built method " \
           "starts on them" in out
    not_built = sorted({r.label for r in spec.rows.values() if r.method not in built_methods(spec)})
    assert f"not built: {', '.join(not_built)}" in out


TRAINING_SET_SIZES = {"mnist": (60000, 10), "fmnist": (60000, 10), "cifar10": (50000, 10), "cifar100": (50000, 100)}


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_the_paper_budgets_partitions_draw_on_the_real_training_sets_sizes(path):
    from tasks.data.partition import make_partition

    spec = load_table_file(str(path))
    plan = resolve_budget(spec, "paper", str(path))
    for run in plan_settings(spec, plan, set(), [], str(path)):
        size, classes = TRAINING_SET_SIZES[run.base.data.dataset]
        labels = np.repeat(np.arange(classes), size // classes)
        part = make_partition(labels, run.base.data, 0)
        assert len(part.train) == run.base.data.num_clients
        assert min(len(t) + len(v) for t, v in zip(part.train, part.test)) >= run.base.data.partition.min_size


# ------------------------------------------------------------------------------------------ end to end
@pytest.mark.ray
def test_a_tiny_table_runs_end_to_end(ray_session, workdir, tmp_path):
    raw = tiny_spec(experiment={"name": "tiny", "data": {"num_clients": 4}, "train": {"rounds": 2},
                                "eval": {"diagnostics": False}, "checkpoint": {"every": 0}})
    path, out, results = write_spec(tmp_path, raw), tmp_path / "tiny.md", tmp_path / "results"
    args = ["table", path, "--out", str(out), "--results", str(results), "--parallel", "2",
            "--address", ray_session.get_runtime_context().gcs_address, *(a for o in workdir for a in ("--set", o))]
    assert mooring(args) == 0
    report = out.read_text()
    comp = Comparison(histories={v: {int(s): h for s, h in by_seed.items()} for v, by_seed in
                                 json.loads((results / "s" / "histories.json").read_text()).items()})
    assert sorted(comp.histories) == ["a", "b"] and sorted(comp.histories["a"]) == [0, 1]
    spec = load_table_file(path)
    column = resolve_budget(spec, DEFAULT_BUDGET, path).columns[0]
    for row, label, paper in (("a", "A", "70.0±1.0"), ("b", "B", "60.0")):
        m = measure(comp.histories[row], column)
        assert m.seeds == 2 and f"| {label} | {paper} / **{m.mean:.2f}** [{m.interval[0]:.2f}, {m.interval[1]:.2f}] `" \
            in report
    assert "| C | 65.0 / not built |" in report and "| Kendall's τ · pairs resolved | " in report
    assert ("mooring table " + path + " --set " + workdir[0]) in report
    assert mooring([*args, "--report-only"]) == 0  # rewritten from the saved histories, the same
    assert out.read_text() == report


# ------------------------------------------------------------------------------------------ tuning
def tuned_file(rows: dict) -> dict:
    return {"tuning": {"setting": "s", "trials": 2}, "rows": {
        r: {"params": p, "searched": {k: "0.001..1 log" for k in p}, "metric": "accuracy:final", "trials": 2,
            "best_validation": 0.5, "study": f"tiny-tune-{r}", "date": "2026-11-26"} for r, p in rows.items()}}


def test_tuned_values_replace_the_rows_params_in_the_digits_budget_only(tmp_path):
    raw = tiny_spec(tuning={"setting": "s", "trials": 2}, budgets={"paper": {
        "description": "p", "settings": {"p": {}}, "columns": {"t1/acc": "p"}}})
    path = write_spec(tmp_path, raw)
    (tmp_path / "tiny.tuned.yaml").write_text(yaml.safe_dump(tuned_file({"b": {"mu": 0.02}})))
    spec = load_table_file(path)
    digits = resolve_budget(spec, DEFAULT_BUDGET, path)
    [run] = plan_settings(spec, digits, built_methods(spec), [], path)
    assert run.variants["b"]["algorithm.fedprox.mu"] == 0.02  # the tuned value, not the file's 0.1
    assert spec.rows["b"].params == {"mu": 0.1}
    [paper_run] = plan_settings(spec, resolve_budget(spec, "paper", path), built_methods(spec), [], path)
    assert paper_run.variants["b"]["algorithm.fedprox.mu"] == 0.1  # tuned on the digits: not the paper's budget
    raw["budgets"]["short"] = {"description": "fewer rounds", "overrides": {"train.rounds": 1}, "tuned": True,
                               "settings": {"s": {}}, "columns": {"t1/acc": "s"}}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True))
    spec = load_table_file(path)
    [short_run] = plan_settings(spec, resolve_budget(spec, "short", path), built_methods(spec), [], path)
    assert short_run.variants["b"]["algorithm.fedprox.mu"] == 0.02  # a shorter digits budget that asks for them
    cells = table_cells(spec, digits, built_methods(spec), {"s": Comparison(histories={})})
    text = render_report(spec, digits, cells, built_methods(spec), {"s": run.base}, "mooring table tiny.yaml", path, [],
                         [])
    assert ("| B | `fedprox` | mu = 0.02 | `--tune`: 2 trials (completed and pruned not recorded) over mu in "
            "0.001..1 log on a validation split (study tiny-tune-b, 2026-11-26); best validation accuracy:final 0.5; "
            "**only 2 trials** (fewer than 20) |") in text
    assert "tuned rows (`mooring table --tune`): 2 Optuna trials" in text


@pytest.mark.parametrize(("tuned", "problem"), [
    (tuned_file({"zz": {"mu": 0.02}}), "rows.zz: no such row in the table file"),
    ({"tuning": {}, "rows": {"b": {"params": {}}}}, "rows.b.searched"),
])
def test_a_bad_tuned_values_file_is_one_line(tmp_path, capsys, tuned, problem):
    path = write_spec(tmp_path, tiny_spec())
    (tmp_path / "tiny.tuned.yaml").write_text(yaml.safe_dump(tuned))
    assert mooring(["table", path, "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert problem in err and "tiny.tuned.yaml" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(("change", "problem"), [
    (lambda r: r.update(tuning={"setting": "nope"}), "tuning.setting: unknown setting 'nope'; allowed: s"),
    (lambda r: r["rows"]["b"].update(tune=["nu"]), "rows.b.tune: nu not searchable for fedprox; searchable: mu"),
    (lambda r: r.pop("tuning"), "--tune needs a `tuning:` block"),
])
def test_bad_tuning_is_one_line_before_any_trial(tmp_path, capsys, change, problem):
    raw = tiny_spec(tuning={"setting": "s"})
    change(raw)
    assert mooring(["table", write_spec(tmp_path, raw), "--tune", "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert problem in err and len(err.splitlines()) == 1
    assert not (tmp_path / "tiny.tuned.yaml").exists()


@pytest.mark.ray
def test_tune_writes_each_rows_choice_and_the_table_then_runs_with_it(ray_session, workdir, tmp_path, capsys):
    raw = tiny_spec(experiment={"name": "tiny", "data": {"num_clients": 4}, "train": {"rounds": 2},
                                "eval": {"diagnostics": False}, "checkpoint": {"every": 0}},
                    tuning={"setting": "s", "trials": 2, "validation_fraction": 0.25,
                            "overrides": {"train.rounds": 3}})
    path, results = write_spec(tmp_path, raw), tmp_path / "results"
    overrides = [*workdir, "train.rounds=1"]  # the command line's rounds win over the tuning's
    args = ["table", path, "--results", str(results), "--parallel", "1", "--address", ray_session.get_runtime_context().gcs_address,
            *(a for o in overrides for a in ("--set", o))]
    assert mooring([*args, "--tune"]) == 0
    tuned = yaml.safe_load((tmp_path / "tiny.tuned.yaml").read_text())
    assert list(tuned["rows"]) == ["b"]  # fedavg has nothing to search; C is not built
    assert tuned["set"] == overrides and yaml.safe_load((results / "tuning" / "b.base.yaml").read_text())[
        "train"]["rounds"] == 1
    row = tuned["rows"]["b"]
    assert row["trials"] == 2 and row["metric"] == "accuracy:final" and 0 <= row["best_validation"] <= 1
    assert set(row["params"]) == {"mu"} and row["searched"] == {"mu": "0.0001..1 log"}
    import optuna
    study = optuna.load_study(study_name="tiny-tune-b", storage=f"sqlite:///{results / 'tuning' / 'optuna.db'}")
    assert study.trials[0].params == {"algorithm.fedprox.mu": 0.1}  # the row's own value first
    assert all(len(t.intermediate_values) <= 1 for t in study.trials)  # one round each, as --set says
    assert row["params"]["mu"] == study.best_trial.params["algorithm.fedprox.mu"]
    capsys.readouterr()
    assert mooring([*args, "--tune"]) == 0  # run again: the studies are complete, nothing new is tried
    assert len(optuna.load_study(study_name="tiny-tune-b", storage=study._storage).trials) == 2
    spec = load_table_file(path)
    [run] = plan_settings(spec, resolve_budget(spec, DEFAULT_BUDGET, path), built_methods(spec), [], path)
    assert run.variants["b"]["algorithm.fedprox.mu"] == row["params"]["mu"]


def test_the_reproduce_command_names_a_report_written_elsewhere():
    from argparse import Namespace

    from pipelines.tables import reproduce_command

    args = Namespace(config="configs/tables/fedfm.yaml", budget="short", seeds="0,1,2", overrides=[],
                     out="docs/tables/fedfm.md")
    assert reproduce_command(args, "docs/tables/fedfm.short.md") == \
        "mooring table configs/tables/fedfm.yaml --budget short --seeds 0,1,2 --out docs/tables/fedfm.md"
    assert reproduce_command(Namespace(**{**vars(args), "out": "docs/tables/fedfm.short.md"}),
                             "docs/tables/fedfm.short.md").endswith("--seeds 0,1,2")  # the default: not named


def test_the_budget_names_the_model_family_a_setting_gives_every_method():
    from pipelines.table_report import budget_lines

    path = str(ROOT / "configs" / "tables" / "fedsa.yaml")
    spec = load_table_file(path)
    plan = resolve_budget(spec, "short", path)
    runs = plan_settings(spec, plan, built_methods(spec), [], path)
    lines = budget_lines(plan, {r.setting: r.base for r in runs}, [])
    assert any(line.startswith("- `device_htfe`: digits, each method's clients from the `htfe` model family, 50 "
                               "clients") for line in lines)
    assert any(line.startswith("- `silo_homogeneous`: digits, model `fedsa_digits_1`, 20 clients") for line in lines)
