"""Evaluation: which clients' own models are evaluated and how their accuracies are summarised, and the names of
an evaluation's metrics by split (the global model on the test sets: orchestrator/clients/global_evaluation.py)."""
from __future__ import annotations

import numpy as np

from tasks.algorithms.base import derive_seed

EVAL_STREAM = 0xE7A
VALIDATION_PREFIX = "val_"  # the evaluation metrics of a run evaluated on its validation split (eval.split)


def validation_key(key: str) -> str:
    """The name an evaluation metric (accuracy..., personalized_...) has when measured on the validation split;
    other metrics (losses, diagnostics) keep theirs."""
    if key.startswith(VALIDATION_PREFIX) or not key.startswith(("accuracy", "personalized_", "client_accuracy",
                                                                "worst10_")):
        return key
    return VALIDATION_PREFIX + key


def named_for_split(metrics: dict[str, float], split: str) -> dict[str, float]:
    """An evaluation's metrics under the names of the split they were measured on (eval.split)."""
    return metrics if split == "test" else {validation_key(k): v for k, v in metrics.items()}


def personalized_eval_clients(seed: int, num_clients: int, sample: int | None) -> list[int]:
    """The clients whose own models are evaluated (eval.personalized_clients): all, or a sample drawn from the run
    seed alone, never the method, so every method of a seed is evaluated on the same clients (paired)."""
    if sample is None or sample >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng(derive_seed(seed, EVAL_STREAM))
    return sorted(int(c) for c in rng.choice(num_clients, sample, replace=False))


def worst_fraction_mean(accuracies: list[float], percent: int = 10) -> float:
    """The mean of the lowest ceil(percent · n / 100) of n per-client accuracies, at least one client: the worst
    10 % of 15 clients is the mean of their 2 lowest, of 5 clients the lowest alone. NaN with none."""
    if not accuracies:
        return float("nan")
    k = max(1, -(-len(accuracies) * percent // 100))  # the ceiling in integers: 0.1 · 30 is 3.0000000000000004
    return float(np.mean(sorted(accuracies)[:k]))


def pooled_and_spread(pairs: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    """From each client's (correct, total): the sample-weighted accuracy (all the clients' test samples pooled),
    and over the clients with a test sample, each counting once, their mean accuracy, its standard deviation
    (population: n in the denominator) and the mean of the worst 10 % (`worst_fraction_mean`)."""
    correct, total = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    per = [c / n for c, n in pairs if n > 0]
    nan = float("nan")
    return (correct / total if total else nan, float(np.mean(per)) if per else nan,
            float(np.std(per)) if per else nan, worst_fraction_mean(per))


def personalized_summary(per_client: dict[int, dict[str, tuple[float, float]]]) -> dict[str, float]:
    """Sample-weighted accuracy per metric, plus its mean, spread and worst 10 % across the clients evaluated
    (fairness), and how many clients that was."""
    out: dict[str, float] = {"personalized_clients": len(per_client)}
    metrics = sorted({k for res in per_client.values() for k in res})
    for key in metrics:
        pairs = [per_client[c][key] for c in sorted(per_client) if key in per_client[c]]
        name = "personalized_accuracy" if key == "acc" else f"personalized_{key}"
        worst = "personalized_worst10_accuracy" if key == "acc" else f"personalized_worst10_{key}"
        out[name], out[f"{name}_client_mean"], out[f"{name}_client_std"], out[worst] = pooled_and_spread(pairs)
    return out


def per_client_summary(per_client: dict[int, tuple[float, float]]) -> dict[str, float]:
    """The global model on each evaluated client's own test data ({client: (correct, total)}, eval.per_client):
    client_accuracy (sample-weighted), client_accuracy_mean and client_accuracy_std (each client counting once),
    worst10_accuracy, and how many clients were evaluated."""
    pooled, mean, std, worst = pooled_and_spread([per_client[c] for c in sorted(per_client)])
    return {"client_accuracy": pooled, "client_accuracy_mean": mean, "client_accuracy_std": std,
            "worst10_accuracy": worst, "client_eval_clients": len(per_client)}
