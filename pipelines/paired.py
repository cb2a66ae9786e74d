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
    """`metric`: a "KEY:AGG" metric of the histories, or a summary figure of the runs (Comparison.figure)."""
    a = setting_comp.figure(check.method, metric)
    b = setting_comp.figure(check.baseline, metric)
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

# figures where less is better: a variant wins a seed, and the t-test asks, by being lower
LOWER_IS_BETTER = ("bytes_sent", "bytes_total", "wall_seconds", "simulated_seconds", "time_to_target", "dp_epsilon",
                   "dp_epsilon_stats", "train_loss")


def lower_is_better(metric: str) -> bool:
    """Whether a figure or "KEY:AGG" metric is better lower: a spread across clients (…_std), bytes, seconds, ε."""
    key = metric.partition(":")[0].removeprefix("val_")
    return key.endswith("_std") or key in LOWER_IS_BETTER


def in_points(metric: str) -> bool:
    """Whether a metric's differences read in percentage points (an accuracy or its spread)."""
    return metric in ("global", "personalized") or "accuracy" in metric.partition(":")[0]


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
    lower_is_better: bool = False  # wins and p then count the variant lower

    @property
    def label(self) -> str:
        return f"{self.metric} ↓" if self.lower_is_better else self.metric

    @property
    def scale(self) -> float:
        return 100.0 if in_points(self.metric) else 1.0


def paired_rows(comp: Comparison, baseline: str, metrics: list[str] | None = None) -> list[PairedRow]:
    """Every variant but the baseline, on each metric both have for at least one common seed: `metrics` (summary
    figures or "KEY:AGG" metrics), or by default the global and personalized final accuracies."""
    from orchestrator.experiment.config import ClaimCheck

    specs = [(m, m) for m in metrics] if metrics else PAIRED_METRICS
    rows = []
    for variant in comp.histories:
        if variant == baseline:
            continue
        for name, metric in specs:
            lower = lower_is_better(metric)
            check = ClaimCheck(statement=f"{variant} vs {baseline}", method=variant, baseline=baseline, min_wins=0,
                               expect="worse" if lower else "better")
            verdict = paired_verdict(check, comp, metric)
            if not verdict.diffs:
                continue
            rows.append(PairedRow(variant, name, verdict.seeds, verdict.diffs, sum(verdict.diffs) / len(verdict.diffs),
                                  mean_interval(verdict.diffs), verdict.wins, verdict.p_value, lower))
    return rows


def format_paired(rows: list[PairedRow], baseline: str, metrics: list[str] | None = None) -> str:
    """The paired table: accuracies in percentage points, other figures in their units; with `metrics`, a line for
    each that no variant and the baseline both logged."""
    width = max([12, *(len(r.variant) for r in rows)])
    metric_width = max([13, *(len(r.label) for r in rows)])
    lines = [f"paired against {baseline} (variant − {baseline}, per seed on the same partition; accuracies in "
             "percentage points):",
             f"{'variant':<{width}} {'metric':<{metric_width}} {'per seed':<24} {'mean':>7} {'95 % interval':>17} "
             f"{'wins':>6} {'p':>6}"]
    for r in rows:
        lines.append(f"{r.variant:<{width}} {r.label:<{metric_width}} {per_seed(r):<24} {r.scale * r.mean:>+7.2f} "
                     f"{interval_text(r.interval, r.scale):>17} {f'{r.wins}/{len(r.diffs)}':>6} {p_text(r.p_value):>6}")
    for metric in metrics or []:
        if not any(r.metric == metric for r in rows):
            lines.append(f"{metric}: no variant and {baseline} have it for a common seed (eval.per_client logs the "
                         "global model's figures by client; a method without a global or personal model has none)")
    lines.append("95 % interval: mean ± t(0.975, n − 1) · sample std / √n · wins: seeds where the variant is better "
                 "(higher; lower where marked ↓: a spread, bytes, seconds, ε) · p: one-sided paired t-test, variant "
                 "better (as `mooring claims` judges a claim)")
    return "\n".join(lines)


def per_seed(row: PairedRow) -> str:
    return " ".join(f"{row.scale * d:+.2f}" for d in row.diffs)


def interval_text(interval: tuple[float, float] | None, scale: float = 100.0) -> str:
    return "–" if interval is None else f"[{scale * interval[0]:+.2f}, {scale * interval[1]:+.2f}]"


def p_text(p: float | None) -> str:
    return "–" if p is None else f"{p:.3f}"


def as_json(rows: list[PairedRow]) -> list[dict]:
    return [{"variant": r.variant, "accuracy": r.metric, "lower_is_better": r.lower_is_better, "seeds": r.seeds,
             "diffs": r.diffs, "mean": r.mean,
             "interval_low": None if r.interval is None else r.interval[0],
             "interval_high": None if r.interval is None else r.interval[1], "wins": r.wins, "p_value": r.p_value}
            for r in rows]
