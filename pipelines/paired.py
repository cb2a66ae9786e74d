"""`mooring compare --baseline B`: every other variant against B, seed by seed (the same partition), judged as
`mooring claims` judges a claim (`paired_verdict`, here, which pipelines/claims.py calls: the paired differences,
the wins and the one-sided paired t-test), plus the 95 % t-interval of the mean difference."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pipelines.comparison import Comparison


@dataclass
class Verdict:
    statement: str
    setting: str
    method: str
    baseline: str
    metric: str
    method_values: list[float]
    baseline_values: list[float]
    diffs: list[float]
    wins: int
    needed_wins: int
    p_value: float | None
    holds: bool
    seeds: list[int]  # the seeds both have a value for, in the order of the values and diffs


def paired_verdict(check, setting_comp: Comparison, metric: str) -> Verdict:
    a = setting_comp.values(check.method, metric)
    b = setting_comp.values(check.baseline, metric)
    seeds = [s for s in sorted(a) if a[s] is not None and b.get(s) is not None]
    va, vb = [a[s] for s in seeds], [b[s] for s in seeds]
    sign = 1.0 if check.expect == "better" else -1.0
    diffs = [x - y for x, y in zip(va, vb)]
    wins = sum(1 for d in diffs if sign * d > 0)
    needed = check.min_wins if check.min_wins is not None else math.ceil(0.8 * len(seeds))
    p = one_sided_p(diffs, sign)
    holds = bool(seeds) and sign * float(np.mean(diffs)) > 0 and wins >= needed
    if check.max_p is not None:
        holds = holds and p is not None and p < check.max_p
    return Verdict(check.statement, check.setting, check.method, check.baseline, metric, va, vb, diffs, wins,
                   needed, p, holds, seeds)


def mean_interval(diffs: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """The two-sided t-interval of the mean paired difference, mean ± t((1 + level)/2, n − 1) · s / √n with s the
    sample standard deviation; None with fewer than two differences."""
    if len(diffs) < 2:
        return None
    from scipy.stats import t

    mean, half = float(np.mean(diffs)), float(t.ppf((1 + level) / 2, len(diffs) - 1) * np.std(diffs, ddof=1))
    half /= math.sqrt(len(diffs))
    return mean - half, mean + half


def one_sided_p(diffs: list[float], sign: float) -> float | None:
    """Paired t-test p-value for mean(sign · diff) > 0; None when it is undefined (n < 2 or no spread)."""
    if len(diffs) < 2 or np.std(diffs) == 0:
        return None
    from scipy.stats import ttest_1samp

    return float(ttest_1samp(np.asarray(diffs) * sign, 0.0, alternative="greater").pvalue)


# the final-round accuracies compared, as (label, "KEY:AGG"): the global model's, then the personalized models'
PAIRED_METRICS = (("global", "accuracy:final"), ("personalized", "personalized_accuracy:final"))


@dataclass(frozen=True)
class PairedRow:
    """One variant against the baseline on one metric: per-seed differences (variant − baseline), their mean,
    its 95 % interval (None with fewer than two seeds), the seeds the variant won and the paired t-test's p
    (variant better; None where undefined)."""

    variant: str
    metric: str
    seeds: list[int]
    diffs: list[float]
    mean: float
    interval: tuple[float, float] | None
    wins: int
    p_value: float | None


def paired_rows(comp: Comparison, baseline: str) -> list[PairedRow]:
    """Every variant but the baseline, on each metric both have for at least one common seed."""
    from orchestrator.experiment.config import ClaimCheck

    rows = []
    for variant in comp.histories:
        if variant == baseline:
            continue
        for name, metric in PAIRED_METRICS:
            check = ClaimCheck(statement=f"{variant} vs {baseline}", method=variant, baseline=baseline, min_wins=0)
            verdict = paired_verdict(check, comp, metric)
            if not verdict.diffs:
                continue
            rows.append(PairedRow(variant, name, verdict.seeds, verdict.diffs, sum(verdict.diffs) / len(verdict.diffs),
                                  mean_interval(verdict.diffs), verdict.wins, verdict.p_value))
    return rows


def format_paired(rows: list[PairedRow], baseline: str) -> str:
    """The paired table, in percentage points."""
    width = max([12, *(len(r.variant) for r in rows)])
    lines = [f"paired against {baseline} (variant − {baseline}, per seed on the same partition, percentage points):",
             f"{'variant':<{width}} {'accuracy':<13} {'per seed':<24} {'mean':>7} {'95 % interval':>17} {'wins':>6} "
             f"{'p':>6}"]
    for r in rows:
        lines.append(f"{r.variant:<{width}} {r.metric:<13} {per_seed(r):<24} {100 * r.mean:>+7.2f} "
                     f"{interval_text(r.interval):>17} {f'{r.wins}/{len(r.diffs)}':>6} {p_text(r.p_value):>6}")
    lines.append("95 % interval: mean ± t(0.975, n − 1) · sample std / √n · wins: seeds where the variant is higher · "
                 "p: one-sided paired t-test, variant higher (as `mooring claims` judges a claim)")
    return "\n".join(lines)


def per_seed(row: PairedRow) -> str:
    return " ".join(f"{100 * d:+.2f}" for d in row.diffs)


def interval_text(interval: tuple[float, float] | None) -> str:
    return "–" if interval is None else f"[{100 * interval[0]:+.2f}, {100 * interval[1]:+.2f}]"


def p_text(p: float | None) -> str:
    return "–" if p is None else f"{p:.3f}"


def as_json(rows: list[PairedRow]) -> list[dict]:
    return [{"variant": r.variant, "accuracy": r.metric, "seeds": r.seeds, "diffs": r.diffs, "mean": r.mean,
             "interval_low": None if r.interval is None else r.interval[0],
             "interval_high": None if r.interval is None else r.interval[1], "wins": r.wins, "p_value": r.p_value}
            for r in rows]
