"""The statistics a table's columns are read with (pipelines/table_report.py prints them):

- exact values: a round's accuracy is correct predictions over test samples, logged as the nearest float; it is
  read back as that fraction (`exact`), and aggregated over rounds and averaged over seeds in exact arithmetic, so
  rows with the same counts are tied, however their floats were summed;
- rounds to a target: the first evaluated round whose metric reaches it (`rounds_to`), a run that never does
  counted as one round more than it ran;
- each cell's 95 % t-interval over seeds;
- tiers: every pair of a column's rows compared by a two-sided paired t-test over the seeds both have, the p-values
  Holm-corrected over the column's pairs; rows whose difference is not significant share a letter (a compact
  letter display, `letters`);
- Kendall's τ-b between the paper's order and Mooring's, on exact values (ties as ties).
"""
from __future__ import annotations

import math
from fractions import Fraction
from itertools import combinations
from typing import Any

# the largest denominator a logged value is read back with: a test set of up to 10^7 samples, or its mean over a
# few test sets. Fractions with denominators this size lie ≥ 10^-14 apart, a hundred times a float's rounding.
MAX_DENOMINATOR = 10**7
ALPHA = 0.05  # the familywise error rate of a column's Holm correction


def exact(value: float) -> Fraction:
    """A logged value as the fraction it stands for (c / n for an accuracy); any other value rounded to that
    resolution, so two floats that differ only by summation order read the same."""
    return Fraction(value).limit_denominator(MAX_DENOMINATOR)


def logged(history: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    """(round, value) of every round that logged `key`."""
    out = []
    for i, m in enumerate(history):
        value = m.get(key)
        if value is None or math.isnan(float(value)):
            continue
        out.append((int(m.get("round", i + 1)), float(value)))
    return out


def exact_metric(history: list[dict[str, Any]], spec: str) -> Fraction | None:
    """`KEY:AGG` of one run (pipelines/comparison.py aggregate_metric's aggregations) in exact arithmetic. The
    rounds are chosen on the floats (values equal in exact terms differ by noise only, so which of them is chosen
    does not change the result) and only the chosen ones are read back exactly."""
    key, _, agg = spec.partition(":")
    agg = agg or "final"
    if agg == "last5_sync":
        history, agg = [m for m in history if m.get("model_update_norm", 0) > 0], "last5"
    values = [v for _, v in logged(history, key)]
    if not values:
        return None
    if agg == "final":
        return exact(values[-1])
    if agg == "best":
        return exact(max(values))
    if agg in ("last5", "top5"):
        chosen = values[-5:] if agg == "last5" else sorted(values)[-5:]
        return mean([exact(v) for v in chosen])
    raise ValueError(f"metric {spec!r}: aggregation must be final, best, last5, top5 or last5_sync")


def rounds_to(history: list[dict[str, Any]], key: str, target: float) -> tuple[int, bool] | None:
    """(rounds, reached): the first evaluated round whose `key` is at least `target`, or, where none is, one round
    more than the run's last (a lower bound: it did not reach it in the rounds it had); None when no round logged
    `key`."""
    values = logged(history, key)
    if not values:
        return None
    goal = exact(target)
    for round_, value in values:
        if exact(value) >= goal:
            return round_, True
    last = max(int(m.get("round", i + 1)) for i, m in enumerate(history))
    return last + 1, False


def mean(values: list[Fraction]) -> Fraction:
    return sum(values, Fraction(0)) / len(values)


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """mean ± t((1 + level)/2, n − 1) · s / √n, s the sample standard deviation; None with fewer than two
    values."""
    from pipelines.paired import mean_interval

    return mean_interval(values, level)


def paired_p(a: dict[int, Fraction], b: dict[int, Fraction]) -> float | None:
    """Two-sided paired t-test of a − b over the seeds both have; None with fewer than two. Differences that do
    not vary have no t statistic: equal ones (a tie in every seed) give p = 1, a constant non-zero difference
    p = 0 (the test's limit)."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return None
    diffs = [a[s] - b[s] for s in seeds]
    if len(set(diffs)) == 1:
        return 1.0 if diffs[0] == 0 else 0.0
    from scipy.stats import ttest_1samp

    return float(ttest_1samp([float(d) for d in diffs], 0.0).pvalue)


def holm(pvalues: dict[Any, float | None]) -> dict[Any, float]:
    """Holm's step-down adjusted p-values: sorted p(1) ≤ … ≤ p(m), p̃(i) = max over j ≤ i of min(1, (m − j + 1)
    p(j)); a hypothesis is rejected at level α when p̃ ≤ α. An undefined p counts as 1 (never rejected, but one of
    the m)."""
    m = len(pvalues)
    order = sorted(pvalues, key=lambda k: 1.0 if pvalues[k] is None else pvalues[k])
    adjusted, running = {}, 0.0
    for i, key in enumerate(order):
        p = 1.0 if pvalues[key] is None else pvalues[key]
        running = max(running, min(1.0, (m - i) * p))
        adjusted[key] = running
    return adjusted


def letters(order: list[str], different: set[frozenset[str]]) -> dict[str, str]:
    """A compact letter display: rows that share a letter are not significantly different. The letters are the
    maximal groups of rows no two of which differ (insert-and-absorb, Piepho 2004), lettered from the group of the
    best row down (`order`: best first); each row gets the letters of the groups it is in."""
    rank = {row: i for i, row in enumerate(order)}
    groups = [frozenset(order)]
    for pair in sorted(different, key=lambda p: sorted(rank[r] for r in p)):
        i, j = sorted(pair, key=rank.get)
        split = []
        for g in groups:
            split += [g - {i}, g - {j}] if i in g and j in g else [g]
        groups = [g for g in set(split) if g and not any(g < other for other in split)]
    groups.sort(key=lambda g: sorted(rank[r] for r in g))
    names = [letter_name(k) for k in range(len(groups))]
    return {row: "".join(n for n, g in zip(names, groups) if row in g) for row in order}


def letter_name(k: int) -> str:
    return chr(ord("a") + k) if k < 26 else f"({k + 1})"


def kendall_tau_b(paper: list, ours: list) -> float | None:
    """Kendall's τ-b, (C − D) / √((n0 − n1)(n0 − n2)), over every pair of rows, comparing values exactly (ints,
    Fractions or floats as given): n0 pairs, n1 tied in the paper, n2 tied in Mooring's values, C and D the pairs
    ordered alike and oppositely. None when undefined: fewer than two rows, or either side constant."""
    if len(paper) != len(ours):
        raise ValueError(f"{len(paper)} paper values against {len(ours)} measured")
    n0 = n1 = n2 = concordant = discordant = 0
    for (p1, o1), (p2, o2) in combinations(zip(paper, ours), 2):
        n0 += 1
        dp, do = sign(p1 - p2), sign(o1 - o2)
        n1 += dp == 0
        n2 += do == 0
        concordant += dp * do > 0
        discordant += dp * do < 0
    if n0 == 0 or n1 == n0 or n2 == n0:
        return None
    return (concordant - discordant) / math.sqrt((n0 - n1) * (n0 - n2))


def sign(x) -> int:
    return (x > 0) - (x < 0)


def pairs_of(rows: list[str]) -> list[frozenset[str]]:
    return [frozenset(p) for p in combinations(rows, 2)]
