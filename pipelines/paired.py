"""`mooring compare --baseline B`: every other variant against B, seed by seed (the same partition), judged as
`mooring claims` judges a claim (pipelines/claims.py: paired_verdict, the paired differences, the wins and the
one-sided paired t-test), plus the 95 % t-interval of the mean difference."""
from __future__ import annotations

from dataclasses import dataclass

from pipelines.claims import mean_interval, paired_verdict
from pipelines.compare import Comparison

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
