"""A run's result: its summary figures (the same keys for every method), and the parameters MLflow records."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.experiment.config import ExperimentConfig, flatten
from tasks.privacy.settings import EPSILON_KEYS


@dataclass
class RunResult:
    algorithm: str
    seed: int
    final_accuracy: float | None          # the global model's; None for a method without one
    best_accuracy: float | None
    personalized_accuracy: float | None   # the clients' own models', last round; None for a global-only method
    best_personalized_accuracy: float | None
    rounds: int
    wall_seconds: float
    mlflow_run_id: str | None
    run_dir: str
    history: list[dict[str, Any]] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)  # each round's share of the driver's wall time
    # each round's seconds in the coordinator, from its start there to its end: the round's own work, without the
    # calls' trips and what the driver does meanwhile
    coordinator_round_seconds: list[float] = field(default_factory=list)
    startup_seconds: float = 0.0
    phases: dict[str, list[float]] = field(default_factory=dict)  # seconds per phase (`mooring run --profile`)
    personalized_eval_clients: str | None = None  # whose own models were evaluated: "all", or their ids
    # the participation block's simulated clock (orchestrator/server/participation.py): its total, and when the global
    # accuracy first reached participation.target_accuracy; None without the block or the target
    simulated_seconds: float | None = None
    time_to_target: float | None = None
    dp_epsilon: float | None = None  # privacy.models: ε for privacy.delta after the last round (docs/privacy.md)
    dp_epsilon_stats: float | None = None  # privacy.stats: the same for the class statistics
    # clients left out of their round because their actor was lost twice (orchestrator/ray_runtime/client_pool.py), all rounds
    clients_failed: int = 0
    error: dict[str, Any] | None = None  # a failed run's failure (orchestrator/driver/run_errors.py, RunError.details)
    # the last evaluated round's figures across clients (FAIRNESS_FIGURES; docs/fairness.md), None where not logged
    fairness: dict[str, float | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        keys = ("final_accuracy", "best_accuracy", "personalized_accuracy", "best_personalized_accuracy", "rounds",
                "wall_seconds", "mlflow_run_id", "personalized_eval_clients", "dp_epsilon", "dp_epsilon_stats",
                "clients_failed", "fairness", "error", "history")
        d = asdict(self)
        clock = {k: d[k] for k in ("simulated_seconds", "time_to_target")} if self.simulated_seconds is not None else {}
        return {k: d[k] for k in keys} | clock | {"algorithm": self.algorithm, "seed": self.seed, "run_dir": self.run_dir}


def headline(metrics: dict[str, Any], key: str = "accuracy") -> float | None:
    """One round's accuracy: the global model's (`accuracy`) by default, None where the method has none.
    Never falls back to the personalized figure: the two answer different questions."""
    v = metrics.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def last_logged(history: list[dict[str, Any]], key: str) -> float | None:
    """The last value of `key` the rounds logged (None where none did)."""
    values = [m[key] for m in history if m.get(key) is not None]
    return float(values[-1]) if values else None


# Accuracy across clients, as the last evaluated round logged it (docs/fairness.md): the global model on each
# client's own test data (eval.per_client), and the clients' own models (personalized methods).
FAIRNESS_FIGURES = ("client_accuracy", "client_accuracy_mean", "worst10_accuracy", "client_accuracy_std",
                    "personalized_accuracy_client_mean", "personalized_worst10_accuracy",
                    "personalized_accuracy_client_std")


def fairness_figures(history: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each of FAIRNESS_FIGURES as the last round that logged it a number (None where none did)."""
    out = {}
    for key in FAIRNESS_FIGURES:
        values = [v for v in (headline(m, key) for m in history) if v is not None]
        out[key] = values[-1] if values else None
    return out


def summary_metrics(history: list[dict[str, Any]], target: float | None = None) -> dict[str, float | None]:
    """The figures every run is judged and sorted by, the same keys for every method (None where absent): the
    accuracies, the fairness figures (FAIRNESS_FIGURES), the bytes sent; with a simulated clock (the participation
    block) also its total, and the time to `target` global accuracy; and the ε each privacy mechanism reached
    (None without noise)."""
    out: dict[str, float | None] = {}
    for prefix, key in (("global", "accuracy"), ("personalized", "personalized_accuracy")):
        values = [v for v in (headline(m, key) for m in history) if v is not None]
        out[f"final_{prefix}_accuracy"] = values[-1] if values else None
        out[f"best_{prefix}_accuracy"] = max(values) if values else None
    out.update(fairness_figures(history))
    out["bytes_sent"] = last_logged(history, "bytes_total")
    clock = last_logged(history, "simulated_seconds")
    if clock is not None:
        from orchestrator.server.participation import time_to_accuracy

        out["simulated_seconds"] = clock
        out["time_to_target"] = time_to_accuracy(history, target) if target is not None else None
    success = last_logged(history, "attack_success_rate")  # a backdoor's (threat.attack: backdoor)
    if success is not None:
        out["attack_success_rate"] = success
    return out | {key: last_logged(history, key) for key in EPSILON_KEYS}


def summarize(cfg: ExperimentConfig, history: list[dict[str, Any]], **kw) -> RunResult:
    s = summary_metrics(history, cfg.participation.target_accuracy)
    return RunResult(
        algorithm=cfg.algorithm.name, seed=cfg.seed,
        final_accuracy=s["final_global_accuracy"], best_accuracy=s["best_global_accuracy"],
        personalized_accuracy=s["final_personalized_accuracy"],
        best_personalized_accuracy=s["best_personalized_accuracy"], rounds=len(history), history=history,
        dp_epsilon=s["dp_epsilon"], dp_epsilon_stats=s["dp_epsilon_stats"],
        personalized_eval_clients=evaluated_clients(cfg), simulated_seconds=s.get("simulated_seconds"),
        time_to_target=s.get("time_to_target"), clients_failed=sum(m.get("clients_failed", 0) for m in history),
        fairness={k: s[k] for k in FAIRNESS_FIGURES}, **kw)


def evaluated_clients(cfg: ExperimentConfig) -> str | None:
    """Whose own models a personalized method's evaluation covers: "all", or the sampled ids ("3,8,11");
    None for a method without personalized evaluation."""
    from orchestrator.server.evaluation import personalized_eval_clients
    from tasks.algorithms import ALGORITHMS

    if not ALGORITHMS.get(cfg.algorithm.name).capabilities().personalized:
        return None
    ids = personalized_eval_clients(cfg.seed, cfg.data.num_clients, cfg.eval.personalized_clients)
    return "all" if len(ids) == cfg.data.num_clients else ",".join(map(str, ids))


def run_params(cfg: ExperimentConfig) -> dict[str, Any]:
    """The flattened config, with the named algorithm's hyperparameters resolved to their defaults, and for a
    personalized method the clients its evaluation covers."""
    resolved = {"algorithm": {cfg.algorithm.block_name: cfg.algorithm.params_for().model_dump(mode="json")}}
    evaluated = evaluated_clients(cfg)
    return flatten(cfg.to_dict()) | flatten(resolved) | ({"personalized_eval_clients": evaluated} if evaluated else {})
