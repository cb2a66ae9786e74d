"""One federated run on Ray, driven from here: the coordinator runs rounds, this process tracks them.

    run_experiment(cfg) → RunResult
      ├─ connect to (or start) Ray; load the data and its partition once; put it in the object store
      ├─ CoordinatorActor(cfg, data) → ClientActor × K
      ├─ after set-up: actors.json (node, pid, assigned resources of each client actor)
      ├─ each round: coordinator.run_round() → metrics → metrics.jsonl, MLflow, progress bar
      ├─ every checkpoint.every rounds: coordinator.checkpoint()
      └─ at the end: result.json, accuracy plot, final global state, MLflow artifacts
"""
from __future__ import annotations

import json
import logging
import math
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from orchestrator import checkpoint as ckpt
from orchestrator import storage
from orchestrator.config import ConfigError, ExperimentConfig, build_config, flatten
from orchestrator.tracking import Tracker


class RunError(Exception):
    """A run could not start or continue; the message is one line for the user."""


# ------------------------------------------------------------------------------------------- Ray
def check_address(address: str) -> None:
    """Fail fast, in one line, when nothing listens at a Ray address (ray.init would hang or trace)."""
    if address == "auto":
        return
    parsed = urlparse(address if "://" in address else f"ray://{address}")
    if not parsed.hostname or not parsed.port:
        raise RunError(f"--address {address!r}: expected HOST:PORT (for example 127.0.0.1:6379), ray://HOST:10001 or auto")
    try:
        with socket.create_connection((parsed.hostname, parsed.port), timeout=3):
            pass
    except OSError as e:
        raise RunError(f"--address {address}: no Ray cluster reachable there ({e.strerror or e}); "
                       "start one with `ray start --head` or leave out --address for a local one") from None


def init_ray(**kwargs) -> None:
    """ray.init, with client actors at normal CPU priority where this call starts the Ray instance: Ray
    otherwise starts its workers at niceness 15, so the driver, the raylet and anything else on the machine
    preempt the actors that do the training. (A cluster started with `ray start` takes RAY_worker_niceness
    from that command's environment.)"""
    import os

    import ray

    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(**kwargs)


def ensure_ray(address: str | None = None) -> None:
    import ray

    if ray.is_initialized():
        return
    if address:
        check_address(address)
    try:
        init_ray(address=address, logging_level=logging.WARNING, include_dashboard=False if not address else None,
                 configure_logging=True, log_to_driver=True)
    except (ConnectionError, RuntimeError) as e:
        raise RunError(f"could not connect to Ray at {address or 'a new local instance'}: {str(e).splitlines()[0]}") from None


def default_num_actors(cfg: ExperimentConfig) -> int:
    """resources.num_actors, or as many actors as the cluster's CPUs (and GPUs) hold."""
    import ray

    total = ray.cluster_resources()
    if cfg.resources.num_actors:
        check_fits(cfg, cfg.resources.num_actors, total)
        return min(cfg.resources.num_actors, cfg.data.num_clients)
    fits = int(total.get("CPU", 1) // cfg.resources.cpus_per_actor)
    if cfg.resources.gpus_per_actor > 0:
        fits = min(fits, int(total.get("GPU", 0) // cfg.resources.gpus_per_actor))
    return max(1, min(fits, cfg.resources.max_actors, cfg.data.num_clients))


def check_fits(cfg: ExperimentConfig, num_actors: int, total: dict[str, float]) -> None:
    """Actors that can never be placed would leave their clients waiting forever: refuse them up front."""
    res = cfg.resources
    for name, each in (("CPU", res.cpus_per_actor), ("GPU", res.gpus_per_actor)):
        need = min(num_actors, cfg.data.num_clients) * each
        if need > total.get(name, 0) + 1e-9:
            raise RunError(f"resources.num_actors = {num_actors} × {each:g} {name} per actor needs {need:g} {name}s; "
                           f"the Ray cluster has {total.get(name, 0):g}: lower num_actors or the per-actor share")


# ------------------------------------------------------------------------------------------ results
@dataclass
class RunResult:
    algorithm: str
    seed: int
    final_accuracy: float | None
    best_accuracy: float | None
    personalized_accuracy: float | None
    rounds: int
    wall_seconds: float
    mlflow_run_id: str | None
    run_dir: str
    history: list[dict[str, Any]] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)
    startup_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        keys = ("final_accuracy", "best_accuracy", "personalized_accuracy", "rounds", "wall_seconds",
                "mlflow_run_id", "history")
        d = asdict(self)
        return {k: d[k] for k in keys} | {"algorithm": self.algorithm, "seed": self.seed, "run_dir": self.run_dir}


def headline(metrics: dict[str, Any]) -> float | None:
    """The accuracy a run is judged by: the global model's, or the personalized one where there is none."""
    for key in ("accuracy", "personalized_accuracy"):
        v = metrics.get(key)
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            return float(v)
    return None


def summarize(cfg: ExperimentConfig, history: list[dict[str, Any]], **kw) -> RunResult:
    scores = [s for s in (headline(m) for m in history) if s is not None]
    personal = [m["personalized_accuracy"] for m in history if "personalized_accuracy" in m]
    return RunResult(
        algorithm=cfg.algorithm.name, seed=cfg.seed,
        final_accuracy=scores[-1] if scores else None, best_accuracy=max(scores) if scores else None,
        personalized_accuracy=personal[-1] if personal else None, rounds=len(history), history=history, **kw)


# -------------------------------------------------------------------------------------- run directory
def new_run_dir(cfg: ExperimentConfig) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    return storage.join(cfg.checkpoint.dir, f"{cfg.name}-{cfg.algorithm.name}-s{cfg.seed}-{stamp}")


def read_run_config(run_dir: str, overrides: list[str]) -> ExperimentConfig:
    from orchestrator.config import apply_overrides

    path = storage.join(run_dir, "config.yaml")
    if not storage.exists(path):
        raise RunError(f"--resume {run_dir}: not a run directory (no config.yaml there)")
    import yaml

    raw = yaml.safe_load(storage.read_bytes(path).decode())
    return build_config(apply_overrides(raw, overrides), path)


def code_version() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class RunLog:
    """What the run directory holds: the resolved config, metrics.jsonl, run.json, result.json."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir

    def write(self, name: str, text: str) -> None:
        storage.write_bytes_atomic(storage.join(self.run_dir, name), text.encode())

    def read_json(self, name: str) -> dict[str, Any]:
        path = storage.join(self.run_dir, name)
        return json.loads(storage.read_bytes(path)) if storage.exists(path) else {}

    def write_metrics(self, history: list[dict[str, Any]]) -> None:
        self.write("metrics.jsonl", "".join(json.dumps(m) + "\n" for m in history))


# ------------------------------------------------------------------------------------------ the run
def run_experiment(cfg: ExperimentConfig, *, address: str | None = None, resume_dir: str | None = None,
                   progress: bool = True, parent_run_id: str | None = None, on_round=None,
                   stop_after: int | None = None, run_dir: str | None = None) -> RunResult:
    """Run (or resume) one experiment. `on_round(metrics)` may raise to stop it (sweeps prune this way);
    `stop_after` stops after that many rounds in total, leaving a checkpoint (for resume tests)."""
    import ray

    from orchestrator.actors import CoordinatorActor
    from orchestrator.datasets import prepare_data

    t0 = time.perf_counter()
    ensure_ray(address)
    startup = time.perf_counter() - t0
    run_dir = resume_dir or run_dir or new_run_dir(cfg)
    log = RunLog(run_dir)
    snapshot = None
    if resume_dir:
        latest = ckpt.latest_checkpoint(run_dir)
        snapshot = ckpt.load_server_snapshot(latest) if latest else None
    else:
        log.write("config.yaml", cfg.to_yaml())

    data = prepare_data(cfg)
    data_ref = ray.put(data)
    tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.enabled)
    run_info = log.read_json("run.json")
    tags = {"algorithm": cfg.algorithm.name, "dataset": cfg.data.dataset, "partition_hash": data.partition_hash,
            "seed": str(cfg.seed), "code_version": code_version(), "run_dir": run_dir}
    tracker.start(f"{cfg.name}-{cfg.algorithm.name}-s{cfg.seed}", run_params(cfg), tags,
                  parent_run_id=parent_run_id, resume_run_id=run_info.get("mlflow_run_id"))
    log.write("run.json", json.dumps({"mlflow_run_id": tracker.run_id, "tracking_uri": tracker.uri, **tags}))

    coordinator = CoordinatorActor.options(name=coordinator_name(run_dir), scheduling_strategy=on_this_node(),
                                           ).remote(cfg, [data_ref], default_num_actors(cfg), run_dir, snapshot)
    history: list[dict[str, Any]] = list(snapshot["history"]) if snapshot else []
    round_seconds: list[float] = []
    status = "FAILED"
    try:
        ray.get(coordinator.set_up.remote())
        # Where each client actor runs and what it was given (node, pid, GPU share): placement on a cluster.
        log.write("actors.json", json.dumps(ray.get(coordinator.actor_info.remote()), indent=1))
        last = cfg.train.rounds if stop_after is None else min(cfg.train.rounds, stop_after)
        bar = _progress_bar(progress, cfg.train.rounds, len(history))
        # The next round (and a due checkpoint before it: the coordinator runs calls in order) is asked for
        # before this round is logged, so MLflow, metrics.jsonl and on_round overlap the training.
        next_round = coordinator.run_round.remote() if len(history) < last else None
        r0 = time.perf_counter()
        while next_round is not None:
            metrics = ray.get(next_round)
            round_seconds.append(time.perf_counter() - r0)
            r0 = time.perf_counter()
            history.append(metrics)
            every = cfg.checkpoint.every
            checkpoint = coordinator.checkpoint.remote() \
                if (every and metrics["round"] % every == 0) or len(history) == last else None
            next_round = coordinator.run_round.remote() if len(history) < last else None
            log.write_metrics(history)
            tracker.log_metrics({**metrics, "seconds_per_round": round_seconds[-1]}, step=metrics["round"])
            _advance(bar, metrics, round_seconds[-1])
            if checkpoint is not None:
                ray.get(checkpoint)
            if on_round is not None:
                on_round(metrics)
        if bar is not None:
            bar.close()
        final_state = ray.get(coordinator.final_state.remote())
        status = "FINISHED" if len(history) == cfg.train.rounds else "KILLED"
    except ray.exceptions.RayActorError as e:
        tracker.end("FAILED")
        raise RunError(coordinator_lost(run_dir, len(history), e)) from None
    except BaseException:
        tracker.end("FAILED")
        raise
    finally:
        result = summarize(cfg, history, wall_seconds=time.perf_counter() - t0, mlflow_run_id=tracker.run_id,
                           run_dir=run_dir, round_seconds=round_seconds, startup_seconds=startup)
        log.write("result.json", json.dumps(result.to_json(), indent=1))
        ray.kill(coordinator)
    _finish_artifacts(cfg, result, final_state, log, tracker)
    tracker.end(status)
    return result


def on_this_node():
    """Keep the coordinator (no restarts) on the driver's node, which the run cannot outlive anyway: left to
    Ray's spreading (or with a soft affinity, once that node is half used), a 0-CPU actor may land on a worker
    node, and die with it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def coordinator_name(run_dir: str) -> str:
    return "mooring-coordinator-" + run_dir.rstrip("/").rsplit("/", 1)[-1]


def coordinator_lost(run_dir: str, rounds_done: int, err: Exception) -> str:
    latest = ckpt.latest_checkpoint(run_dir)
    where = f"its last checkpoint is {latest}; continue with `mooring run --resume {run_dir}`" if latest else \
        "no checkpoint was written yet; start the run again"
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"the coordinator died after round {rounds_done} ({first[:160]}); {where}"


def run_params(cfg: ExperimentConfig) -> dict[str, Any]:
    """The flattened config, with the named algorithm's hyperparameters resolved to their defaults."""
    resolved = {"algorithm": {cfg.algorithm.name: cfg.algorithm.params_for().model_dump(mode="json")}}
    return flatten(cfg.to_dict()) | flatten(resolved)


def _progress_bar(enabled: bool, total: int, initial: int):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc="rounds", unit="round", dynamic_ncols=True)


def _advance(bar, metrics: dict[str, Any], seconds: float) -> None:
    if bar is None:
        return
    acc = headline(metrics)
    bar.set_postfix({"acc": f"{acc:.3f}" if acc is not None else "-", "s/round": f"{seconds:.2f}"})
    bar.update(1)


def _finish_artifacts(cfg, result: RunResult, final_state, log: RunLog, tracker: Tracker) -> None:
    """The accuracy plot, the final global state and the resolved config, in the run dir and in MLflow;
    for anchor and prototype methods also the anchors and a PNG of their pairwise cosine similarities."""
    from orchestrator.plots import plot_history

    if storage.is_remote(log.run_dir):
        return
    run_dir = Path(log.run_dir)
    plot_history({cfg.algorithm.name: result.history}, run_dir / "accuracy.png", title=cfg.name)
    storage.write_bytes_atomic(str(run_dir / "final_state.pt"), storage.torch_bytes(final_state))
    names = ["config.yaml", "accuracy.png", "final_state.pt", "metrics.jsonl", "result.json"]
    names += _anchor_artifacts(final_state, run_dir, cfg.algorithm.name)
    for name in names:
        tracker.log_artifact(run_dir / name)


ANCHOR_KEYS = ("anchors", "prototypes")


def _anchor_artifacts(state, run_dir: Path, algorithm: str) -> list[str]:
    import torch

    from orchestrator.plots import plot_matrix

    written = []
    for key in ANCHOR_KEYS:
        anchors = state.get(key) if isinstance(state, dict) else None
        if not isinstance(anchors, torch.Tensor) or anchors.dim() != 2:
            continue
        storage.write_bytes_atomic(str(run_dir / f"{key}.pt"), storage.torch_bytes(anchors))
        unit = torch.nn.functional.normalize(anchors.double(), dim=1)
        plot_matrix((unit @ unit.T).numpy(), run_dir / f"{key}_cosine.png",
                    title=f"{algorithm}: pairwise cosine similarity of the {key}", label="cosine")
        written += [f"{key}.pt", f"{key}_cosine.png"]
    return written


def load_config_for_run(config_path: str | None, overrides: list[str], resume: str | None) -> ExperimentConfig:
    if resume:
        return read_run_config(resume, overrides)
    if config_path is None:
        raise ConfigError("mooring run: give a CONFIG file (or --resume RUN_DIR)")
    from orchestrator.config import load_config

    return load_config(config_path, overrides)
