"""One federated run on Ray, driven from here: the coordinator runs rounds, this process tracks them.

    run_experiment(cfg) → RunResult
      ├─ connect to (or start) Ray, while the data and its partition are loaded in the background
      ├─ CoordinatorActor(cfg) → ClientActor × K start; meanwhile the data goes into the object store and MLflow
      │  opens the run; coordinator.start(data) loads the actors
      ├─ after set-up: actors.json (node, pid, assigned resources of each client actor); at the end again,
      │  with the devices its data and models were on and its peak CUDA memory
      ├─ each round: coordinator.run_round() → metrics → metrics.jsonl, MLflow, progress bar
      ├─ every checkpoint.every rounds: coordinator.checkpoint()
      └─ at the end: result.json, accuracy plot, final global state, MLflow artifacts
    Every phase is timed (orchestrator/phases.py; `mooring run --profile`).
"""
from __future__ import annotations

import json
import logging
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext, suppress
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from orchestrator import checkpoint as ckpt
from orchestrator import resume_config, run_lock, storage
from orchestrator.config import ConfigError, ExperimentConfig, build_config, flatten
from orchestrator.phases import Phases
from orchestrator.tracking import Tracker
from tasks.privacy.server import final_epsilons


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


# A client actor's results (a round's client models: 70 KB each for the digits MLP) come back inline up to this
# size instead of through the object store: 36 against 46 ms per round of 10 tiny clients on 2 actors here
# (benchmarks/README.md, "Tiny clients"). Ray's default is 100 KiB.
INLINE_RETURNS = {"max_direct_call_object_size": 4 * 1024 * 1024}


def init_ray(**kwargs) -> None:
    """ray.init, with client actors at normal CPU priority where this call starts the Ray instance: Ray
    otherwise starts its workers at niceness 15, so the driver, the raylet and anything else on the machine
    preempt the actors that do the training. (A cluster started with `ray start` takes RAY_worker_niceness
    from that command's environment.) A local instance listens on 127.0.0.1 only, and a driver joining an
    instance at a loopback address joins it there (Ray would otherwise swap 127.0.0.1 for the machine's
    outward address). A new local instance asked for without a dashboard starts lean. These three reach into
    Ray's internals: orchestrator/ray_internals.py, where each is checked before it applies."""

    import ray

    from orchestrator import ray_internals

    os.environ.setdefault("RAY_worker_niceness", "0")
    address = kwargs.get("address") or os.environ.get("RAY_ADDRESS")
    lean = nullcontext()
    if address is None:
        if "RAY_AUTH_MODE" not in os.environ:
            ray_internals.enable_token_auth()
        kwargs = {**kwargs, "_system_config": {**INLINE_RETURNS, **kwargs.get("_system_config", {})}}
        if kwargs.get("include_dashboard") is False:
            lean = ray_internals.lean_start()
    if address is None or is_loopback(address):
        with ray_internals.loopback_only(), lean:
            ray.init(**kwargs)
    else:
        ray.init(**kwargs)


def is_loopback(address: str) -> bool:
    host = urlparse(address if "://" in address else f"ray://{address}").hostname or ""
    return host == "localhost" or host.startswith("127.")


def ensure_ray(address: str | None = None) -> None:
    import ray

    if ray.is_initialized():
        return
    if address:
        check_address(address)
    try:
        init_ray(address=address, logging_level=logging.WARNING, include_dashboard=False if not address else None,
                 configure_logging=True, log_to_driver=True)
    except Exception as e:  # noqa: BLE001 - Ray raises bare Exceptions too (a node that timed out during start-up)
        raise RunError(f"could not connect to Ray at {address or 'a new local instance'}: "
                       f"{(str(e).splitlines() or [type(e).__name__])[0]}") from None


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
    final_accuracy: float | None          # the global model's; None for a method without one
    best_accuracy: float | None
    personalized_accuracy: float | None   # the clients' own models', last round; None for a global-only method
    best_personalized_accuracy: float | None
    rounds: int
    wall_seconds: float
    mlflow_run_id: str | None
    run_dir: str
    history: list[dict[str, Any]] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)
    startup_seconds: float = 0.0
    phases: dict[str, list[float]] = field(default_factory=dict)  # seconds per phase (`mooring run --profile`)
    personalized_eval_clients: str | None = None  # whose own models were evaluated: "all", or their ids
    # the participation block's simulated clock (orchestrator/participation.py): its total, and when the global
    # accuracy first reached participation.target_accuracy; None without the block or the target
    simulated_seconds: float | None = None
    time_to_target: float | None = None
    dp_epsilon: float | None = None  # privacy.models: ε for privacy.delta after the last round (docs/privacy.md)
    dp_epsilon_stats: float | None = None  # privacy.stats: the same for the class statistics

    def to_json(self) -> dict[str, Any]:
        keys = ("final_accuracy", "best_accuracy", "personalized_accuracy", "best_personalized_accuracy", "rounds",
                "wall_seconds", "mlflow_run_id", "personalized_eval_clients", "dp_epsilon", "dp_epsilon_stats",
                "history")
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


def summary_metrics(history: list[dict[str, Any]], target: float | None = None) -> dict[str, float | None]:
    """The figures every run is judged and sorted by, the same keys for every method (None where absent); with
    a simulated clock (the participation block) also its total, and the time to `target` global accuracy."""
    out: dict[str, float | None] = {}
    for prefix, key in (("global", "accuracy"), ("personalized", "personalized_accuracy")):
        values = [v for v in (headline(m, key) for m in history) if v is not None]
        out[f"final_{prefix}_accuracy"] = values[-1] if values else None
        out[f"best_{prefix}_accuracy"] = max(values) if values else None
    sent = [m["bytes_total"] for m in history if m.get("bytes_total") is not None]
    out["bytes_sent"] = float(sent[-1]) if sent else None
    clock = [m["simulated_seconds"] for m in history if m.get("simulated_seconds") is not None]
    if clock:
        from orchestrator.participation import time_to_accuracy

        out["simulated_seconds"] = float(clock[-1])
        out["time_to_target"] = time_to_accuracy(history, target) if target is not None else None
    return out | final_epsilons(history)  # privacy: the ε reached (None without noise)


def summarize(cfg: ExperimentConfig, history: list[dict[str, Any]], **kw) -> RunResult:
    s = summary_metrics(history, cfg.participation.target_accuracy)
    return RunResult(
        algorithm=cfg.algorithm.name, seed=cfg.seed,
        final_accuracy=s["final_global_accuracy"], best_accuracy=s["best_global_accuracy"],
        personalized_accuracy=s["final_personalized_accuracy"],
        best_personalized_accuracy=s["best_personalized_accuracy"], rounds=len(history), history=history,
        dp_epsilon=s["dp_epsilon"], dp_epsilon_stats=s["dp_epsilon_stats"],
        personalized_eval_clients=evaluated_clients(cfg), simulated_seconds=s.get("simulated_seconds"),
        time_to_target=s.get("time_to_target"), **kw)


def evaluated_clients(cfg: ExperimentConfig) -> str | None:
    """Whose own models a personalized method's evaluation covers: "all", or the sampled ids ("3,8,11");
    None for a method without personalized evaluation."""
    from orchestrator.federation import personalized_eval_clients
    from tasks.algorithms import ALGORITHMS

    if not ALGORITHMS.get(cfg.algorithm.name).capabilities().personalized:
        return None
    ids = personalized_eval_clients(cfg.seed, cfg.data.num_clients, cfg.eval.personalized_clients)
    return "all" if len(ids) == cfg.data.num_clients else ",".join(map(str, ids))


# -------------------------------------------------------------------------------------- run directory
def new_run_dir(cfg: ExperimentConfig) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    return storage.join(cfg.checkpoint.dir, f"{cfg.name}-{cfg.algorithm.block_name}-s{cfg.seed}-{stamp}")


def read_run_config(run_dir: str, overrides: list[str]) -> ExperimentConfig:
    return build_config(*raw_run_config(run_dir, overrides))


def raw_run_config(run_dir: str, overrides: list[str]) -> tuple[dict[str, Any], str]:
    """A run directory's config.yaml with `overrides` applied, not yet validated, and its path."""
    from orchestrator.config import apply_overrides, parse_yaml_mapping

    path = storage.join(run_dir, "config.yaml")
    if not storage.exists(path):
        raise RunError(f"--resume {run_dir}: not a run directory (no config.yaml there)")
    try:
        text = storage.read_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    return apply_overrides(parse_yaml_mapping(text, path), overrides), path


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

    def read_metrics(self) -> list[dict[str, Any]]:
        path = storage.join(self.run_dir, "metrics.jsonl")
        text = storage.read_bytes(path).decode() if storage.exists(path) else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def write_metrics(self, history: list[dict[str, Any]]) -> None:
        self.write("metrics.jsonl", "".join(strict_json(m) + "\n" for m in history))


def finite_or_none(value):
    """NaN and ±inf as None, recursively: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def strict_json(obj, **kwargs) -> str:
    """Valid JSON (RFC 8259): a NaN or infinite metric is written as null, never as a bare NaN."""
    return json.dumps(finite_or_none(obj), allow_nan=False, **kwargs)


# ------------------------------------------------------------------------------------------ the run
class RunInterrupted(Exception):
    """SIGINT or SIGTERM stopped the run; the message says what was kept and how to resume."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


class StopSignals:
    """SIGINT and SIGTERM while a run is in this (main) thread. During set-up a signal interrupts at once
    (KeyboardInterrupt); during the rounds it is only recorded, and the round loop finishes or abandons the
    rounds in flight (at most ROUNDS_AHEAD), checkpoints and stops. A second signal interrupts at once."""

    def __init__(self):
        self.signum: int | None = None
        self.in_rounds = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        self.install()
        return self

    def install(self) -> None:
        """Take over SIGINT and SIGTERM (again after ray.init, which installs its own SIGTERM handler); on
        exit the handlers in place before the last install come back."""
        import signal

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous = signal.signal(sig, self._handle)
                if previous != self._handle:
                    self._previous[sig] = previous

    def __exit__(self, *exc) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, _frame) -> None:
        if not self.in_rounds or self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum


# seconds a stop request waits for each round in flight before abandoning it
ROUND_GRACE_SECONDS = 5.0


def await_round(ref, stop: StopSignals):
    """The round's metrics, or None if a stop request came and the round did not end within the grace time."""
    import ray

    while not ray.wait([ref], timeout=0.25)[0]:
        if stop.signum is not None:
            if not ray.wait([ref], timeout=ROUND_GRACE_SECONDS)[0]:
                return None
            break
    return ray.get(ref)


def check_output_dirs(cfg: ExperimentConfig) -> None:
    """checkpoint.dir and data.partitions_dir can be written (they, or their nearest existing parent, are
    writable directories), or one line naming the first that cannot; nothing is created."""
    for key, value in (("checkpoint.dir", cfg.checkpoint.dir), ("data.partitions_dir", cfg.data.partitions_dir)):
        if "://" in value:
            continue
        existing = Path(value).absolute()
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise ConfigError(f"{key} = {value!r}: {existing} is a file, not a directory")
        probe = existing / f".mooring-write-test-{os.getpid()}-{threading.get_ident()}"  # per thread: two may check
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise ConfigError(f"{key} = {value!r}: cannot write in {existing} ({e.strerror or e})") from None


def remote_error(err: Exception) -> str:
    """A Ray task's failure as one line: the original exception's type and first line."""
    import ray

    cause = err.cause if isinstance(err, ray.exceptions.RayTaskError) and err.cause is not None else err
    while isinstance(cause, ray.exceptions.RayTaskError) and cause.cause is not None:
        cause = cause.cause
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0][:200]}" if text else type(cause).__name__


def run_experiment(cfg: ExperimentConfig, *, address: str | None = None, resume_dir: str | None = None,
                   progress: bool = True, parent_run_id: str | None = None, on_round=None,
                   stop_after: int | None = None, run_dir: str | None = None,
                   from_round: int | None = None, data: Future | None = None) -> RunResult:
    """Run (or resume) one experiment. `on_round(metrics)` may raise to stop it (sweeps prune this way);
    `stop_after` stops after that many rounds in total, leaving a checkpoint (for resume tests);
    `from_round` resumes from that round's checkpoint instead of the latest; `data`, the FederatedData of
    `prepare_data(cfg)` being prepared already (`mooring run` starts it while Ray starts).

    SIGINT/SIGTERM (in the main thread) end the rounds in flight (or abandon one after ROUND_GRACE_SECONDS),
    write a checkpoint, end the MLflow run KILLED and raise RunInterrupted. A run that fails during set-up
    leaves no run directory behind (unless it was resumed) and ends its MLflow run FAILED."""
    with StopSignals() as stop:
        return _run(cfg, address, resume_dir, progress, parent_run_id, on_round, stop_after, run_dir,
                    from_round, stop, data)


def _run(cfg, address, resume_dir, progress, parent_run_id, on_round, stop_after, run_dir, from_round, stop, data):
    """The run, holding its directory's lock throughout; a full disk is one line with the way on."""
    check_output_dirs(cfg)
    run_dir = resume_dir or run_dir or new_run_dir(cfg)
    try:
        with run_lock.holding(run_dir):
            return _run_holding(cfg, address, resume_dir, progress, parent_run_id, on_round, stop_after, run_dir,
                                from_round, stop, data)
    except run_lock.RunDirInUse as e:
        raise RunError(str(e)) from None
    except OSError as e:
        full = disk_full(run_dir, e)
        if full is None:
            raise
        raise full from None


def _run_holding(cfg, address, resume_dir, progress, parent_run_id, on_round, stop_after, run_dir, from_round, stop,
                 data):
    import ray

    if resume_dir:
        resume_config.check_unchanged(resume_dir, cfg)
    snapshot = resume_snapshot(resume_dir, from_round, cfg) if resume_dir else None
    t0 = time.perf_counter()
    phases = Phases()
    log = RunLog(run_dir)
    try:
        coordinator, tracker = _set_up(cfg, address, log, snapshot, parent_run_id, phases, stop, bool(resume_dir),
                                       data)
    except BaseException as e:
        if not resume_dir:
            storage.remove_tree(run_dir)
        if isinstance(e, ray.exceptions.RayError):
            raise RunError(f"the run could not start: {remote_error(e)}") from None
        raise
    startup = sum(phases.as_dict().get("start: Ray", []))
    history: list[dict[str, Any]] = list(snapshot["history"]) if snapshot else []
    tracked = backfill_tracking(tracker, log, len(history)) if resume_dir else set()
    round_seconds: list[float] = []
    status, final_state, interrupted = "FAILED", None, None
    try:
        stop.in_rounds = True
        _import_plotting_meanwhile(run_dir)
        history, interrupted = _rounds(cfg, coordinator, log, tracker, history, round_seconds, progress,
                                       on_round, stop_after, stop, tracked, phases)
        if interrupted is None:
            # again at the end, now with where the tensors lived (data and model devices, peak CUDA memory)
            log.write("actors.json", json.dumps(ray.get(coordinator.actor_info.remote(timeout=30.0)), indent=1))
            with phases("end: final state"):
                final_state = ray.get(coordinator.final_state.remote())
            phases.merge(ray.get(coordinator.phases.remote()))
        status = "FINISHED" if len(history) == cfg.train.rounds else "KILLED"
    except ray.exceptions.RayActorError as e:
        tracker.end("FAILED")
        raise RunError(coordinator_lost(run_dir, len(history), e)) from None
    except ray.exceptions.RayTaskError as e:
        tracker.end("FAILED")
        raise disk_full(run_dir, e) or RunError(f"round {len(history) + 1} failed: {remote_error(e)}; "
                                                f"{resume_hint(run_dir)}") from None
    except KeyboardInterrupt:
        tracker.end("KILLED")
        raise RunInterrupted(f"stopped during round {len(history) + 1}; {resume_hint(run_dir)}",
                             stop.signum or 2) from None
    except BaseException:
        tracker.end("FAILED")
        raise
    finally:
        stop.in_rounds = False
        result = summarize(cfg, history, wall_seconds=time.perf_counter() - t0, mlflow_run_id=tracker.run_id,
                           run_dir=run_dir, round_seconds=round_seconds, startup_seconds=startup)
        ray.kill(coordinator)
        # a full disk here must not hide the error already on its way out
        with suppress(OSError) if sys.exc_info()[1] is not None else nullcontext():
            log.write("result.json", strict_json(result.to_json(), indent=1))
    if interrupted is not None:
        tracker.end("KILLED")
        raise RunInterrupted(interrupted, stop.signum)
    with phases("end: artifacts"):
        _finish_artifacts(cfg, result, final_state, log, tracker)
    with phases("end: MLflow"):
        summary = summary_metrics(history, cfg.participation.target_accuracy)
        tracker.log_summary(summary | {"wall_seconds": result.wall_seconds, "rounds": len(history)}, step=len(history))
        tracker.end(status)
    result.phases = phases.as_dict()
    return result


def resume_snapshot(run_dir: str, from_round: int | None, cfg: ExperimentConfig) -> dict[str, Any] | None:
    """The verified server snapshot a resume starts from (None: no checkpoint yet, start at round 0), of a round
    within cfg's train.rounds. Resuming from an earlier round makes it LATEST, which the client actors then load."""
    checkpoint = verified_checkpoint(run_dir, from_round)
    if checkpoint is None:
        return None
    snapshot = ckpt.load_server_snapshot(checkpoint)
    resume_config.check_rounds(run_dir, cfg, snapshot["round"])
    if from_round is not None:
        ckpt.mark_latest(run_dir, ckpt.checkpoint_name(from_round))
    return snapshot


def verified_checkpoint(run_dir: str, from_round: int | None) -> str | None:
    """The checkpoint a resume of `run_dir` starts from, every file of it verified (None: no checkpoint yet); a
    damaged one is one RunError line naming the file and the newest intact checkpoint."""
    try:
        return ckpt.checkpoint_to_resume(run_dir, from_round)
    except ckpt.CheckpointError as e:
        raise RunError(f"cannot resume: {e}") from None


def disk_full(run_dir: str, err: BaseException) -> RunError | None:
    """A full disk (or quota) as one line naming the file and the way on, if that is what `err` is."""
    full = storage.out_of_space(err)
    if full is None:
        return None
    then = (f"continue with `mooring run --resume {run_dir}`" if storage.exists(storage.join(run_dir, "config.yaml"))
            else "start the run again")  # a run that failed in set-up left no directory
    return RunError(f"{full.filename or run_dir}: {full.strerror or 'no space left'}; free space there, then {then}")


def resume_hint(run_dir: str) -> str:
    latest = ckpt.latest_checkpoint(run_dir)
    if latest is None:
        return "no checkpoint was written; start the run again"
    return f"the last checkpoint is {latest}; continue with `mooring run --resume {run_dir}`"


def _set_up(cfg, address, log: RunLog, snapshot, parent_run_id, phases: Phases, stop: StopSignals, resumed: bool,
            data_ready: Future | None):
    """Ray, data, MLflow run, coordinator and client actors; returns (coordinator, tracker). What does not depend
    on the rest overlaps: the data (and torch, which it imports) is prepared while Ray starts; the client
    actors' processes start (importing torch) while the data goes into the object store and MLflow opens its
    run. On failure the MLflow run, if one was opened, ends FAILED (KILLED on an interrupt)."""
    import ray

    coordinator = tracking_started = None
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="mooring-start") as background:
        if data_ready is None:
            data_ready = background.submit(_timed, phases, "start: data (in the background)", prepare_data, cfg)
        try:
            with phases("start: Ray"):
                ensure_ray(address)
            stop.install()
            from orchestrator.actors import CoordinatorActor

            if not resumed:
                log.write("config.yaml", cfg.to_yaml())
                resume_config.record(log.run_dir, cfg)
            with phases("start: launch coordinator"):
                coordinator = CoordinatorActor.options(name=coordinator_name(log.run_dir),
                                                       scheduling_strategy=on_this_node(),
                                                       ).remote(cfg, default_num_actors(cfg), log.run_dir)
            with phases("start: wait for the data"):
                data = data_ready.result()
            check_engine(cfg, data)
            tags = {"algorithm": cfg.algorithm.name, "dataset": cfg.data.dataset, "partition_hash": data.partition_hash,
                    **(data.partition.tally.as_tags() if data.partition.tally else {}),
                    "seed": str(cfg.seed), "code_version": code_version(), "run_dir": log.run_dir}
            tracking_started = background.submit(
                _timed, phases, "start: MLflow run (in the background)", start_tracking, cfg, tags,
                parent_run_id, log.read_json("run.json").get("mlflow_run_id"))
            with phases("start: data into the object store"):
                data_ref = ray.put(data)
            # the object store holds it now: this process's copy goes (100,000 clients' images: hundreds of MB)
            del data
            data_ready = None
            with phases("start: client actors ready and loaded"):
                ray.get(coordinator.start.remote([data_ref], snapshot))
            with phases("start: wait for MLflow"):
                tracker = tracking_started.result()
            log.write("run.json", json.dumps({"mlflow_run_id": tracker.run_id, "tracking_uri": tracker.uri, **tags}))
            with phases("start: set-up exchange"):
                # set_up also writes actors.json: where each client actor runs and what it was given
                ray.get(coordinator.set_up.remote())
        except BaseException as e:
            _abandon_set_up(coordinator, tracking_started, "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED")
            raise
    return coordinator, tracker


def check_engine(cfg: ExperimentConfig, data) -> None:
    """Refuse, before any client actor loads, a `train.engine: vectorized` the method or its model cannot run on
    (`auto` falls back and `sequential` runs anything, so neither builds the model here)."""
    from orchestrator.federation import build_algorithm
    from tasks.algorithms.engines import choose_engine

    if cfg.train.engine != "vectorized":
        return
    try:
        choose_engine(cfg.train.engine, build_algorithm(cfg, data.num_classes, data.input_shape))
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _abandon_set_up(coordinator, tracking_started, status: str) -> None:
    import ray

    if coordinator is not None:
        ray.kill(coordinator)
    if tracking_started is not None and tracking_started.exception() is None:
        tracking_started.result().end(status)


# Rounds asked of the coordinator ahead of the one the driver waits for: it starts the next round as soon as it
# ends one, instead of idling for the metrics' trip to the driver and the next call's back (2 ms a round here).
ROUNDS_AHEAD = 2


class RoundQueue:
    """The coordinator's calls in flight, in the order it runs them: each round, and after it a checkpoint
    where one is due (every `checkpoint.every` rounds, and after the last), asked for with the round."""

    def __init__(self, coordinator, done: int, last: int, every: int):
        self.coordinator, self.submitted, self.last, self.every = coordinator, done, last, every
        self.calls: deque = deque()
        while self.submitted < min(done + ROUNDS_AHEAD, last):
            self.submit()

    def submit(self) -> None:
        self.submitted += 1
        due = (self.every and self.submitted % self.every == 0) or self.submitted == self.last
        self.calls.append((self.coordinator.run_round.remote(), self.coordinator.checkpoint.remote() if due else None))

    def next(self, stopping: bool):
        """(round, checkpoint or None) of the next round; one more round asked for unless stopping, and the
        last round before a stop checkpointed."""
        round_ref, checkpoint = self.calls.popleft()
        if not stopping and self.submitted < self.last:
            self.submit()
        if stopping and not self.calls and checkpoint is None:
            checkpoint = self.coordinator.checkpoint.remote()
        return round_ref, checkpoint


def _rounds(cfg, coordinator, log: RunLog, tracker: Tracker, history: list, round_seconds: list, progress: bool,
            on_round, stop_after, stop: StopSignals, tracked: set[int], phases: Phases) -> tuple[list, str | None]:
    """The round loop. Returns (history, None) when done, or (history, message) when a signal stopped it: the
    rounds asked for by then are finished (or abandoned after a grace time) and the last one checkpointed.
    Rounds in `tracked` are in MLflow already (a resumed run's) and are not logged again. MLflow,
    metrics.jsonl and on_round overlap the coordinator's next rounds."""
    import ray

    last = cfg.train.rounds if stop_after is None else min(cfg.train.rounds, stop_after)
    bar = _progress(progress, cfg.train.rounds, len(history))
    queue = RoundQueue(coordinator, len(history), last, cfg.checkpoint.every)
    metrics_file = MetricsFile(log)
    r0 = time.perf_counter()
    try:
        while queue.calls:
            with phases("driver: wait for the round"):
                metrics = await_round(queue.calls[0][0], stop)
            if metrics is None:  # stop requested and the round did not end in time: abandoned
                tracker.flush()
                return history, (f"round {len(history) + 1} abandoned after a stop signal; "
                                 f"{resume_hint(log.run_dir)}")
            stopping = stop.signum is not None
            _, checkpoint = queue.next(stopping)
            round_seconds.append(time.perf_counter() - r0)
            r0 = time.perf_counter()
            history.append(metrics)
            with phases("driver: metrics.jsonl"):
                metrics_file.update(history, force=checkpoint is not None)
            with phases("driver: MLflow"):
                if metrics["round"] not in tracked:
                    tracker.log_metrics({**metrics, "seconds_per_round": round_seconds[-1]}, step=metrics["round"])
            _advance(bar, metrics, round_seconds[-1])
            if checkpoint is not None:
                with phases("driver: wait for the checkpoint"):
                    written = ray.get(checkpoint)
            if stopping:
                if not queue.calls:
                    return history, (f"stopped after round {metrics['round']}; checkpoint {written}; "
                                     f"continue with `mooring run --resume {log.run_dir}`")
                continue
            if on_round is not None:
                on_round(metrics)
    finally:
        metrics_file.update(history, force=True)
        if bar is not None:
            bar.close()
    return history, None


def backfill_tracking(tracker: Tracker, log: RunLog, resumed_at: int) -> set[int]:
    """A resumed run's MLflow history gets the rounds up to its checkpoint that it lacks (metrics buffered when
    the run was stopped never reached the store), from metrics.jsonl. Returns the rounds the store now has:
    rounds after the checkpoint that it already holds are not logged again when they are re-run."""
    have = tracker.logged_steps("round")
    missing = [m for m in log.read_metrics() if m["round"] <= resumed_at and m["round"] not in have]
    for m in missing:
        tracker.log_metrics(m, step=m["round"])
    tracker.flush()
    return have | {m["round"] for m in missing}


def start_tracking(cfg: ExperimentConfig, tags: dict[str, str], parent_run_id: str | None,
                   resume_run_id: str | None) -> Tracker:
    tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.enabled)
    tracker.start(f"{cfg.name}-{cfg.algorithm.block_name}-s{cfg.seed}", run_params(cfg), tags,
                  parent_run_id=parent_run_id, resume_run_id=resume_run_id)
    return tracker


def prepare_data(cfg: ExperimentConfig):
    """The run's FederatedData (imports torch and pyarrow: called in a thread, off the main thread's path to Ray)."""
    from orchestrator.datasets import prepare_data

    return prepare_data(cfg)


def _timed(phases: Phases, name: str, fn, *args, **kwargs):
    with phases(name):
        return fn(*args, **kwargs)


class MetricsFile:
    """metrics.jsonl, rewritten at most every `every_seconds` (and when forced: at checkpoints and at the end),
    not after every round: a short round would otherwise pay for rewriting the whole history each time."""

    def __init__(self, log: RunLog, every_seconds: float = 2.0):
        self.log, self.every_seconds = log, every_seconds
        self.written, self.last = 0, time.monotonic()

    def update(self, history: list[dict[str, Any]], force: bool = False) -> None:
        if len(history) == self.written or not (force or time.monotonic() - self.last >= self.every_seconds):
            return
        self.log.write_metrics(history)
        self.written, self.last = len(history), time.monotonic()


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
    """The flattened config, with the named algorithm's hyperparameters resolved to their defaults, and for a
    personalized method the clients its evaluation covers."""
    resolved = {"algorithm": {cfg.algorithm.block_name: cfg.algorithm.params_for().model_dump(mode="json")}}
    evaluated = evaluated_clients(cfg)
    return flatten(cfg.to_dict()) | flatten(resolved) | ({"personalized_eval_clients": evaluated} if evaluated else {})


def _progress(enabled: bool, total: int, initial: int):
    from orchestrator.progress import Progress

    return Progress(total, "rounds", initial=initial, enabled=enabled)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def _advance(progress, metrics: dict[str, Any], seconds: float) -> None:
    progress.advance(1, f"global {_pct(headline(metrics))}  "
                        f"personalized {_pct(headline(metrics, 'personalized_accuracy'))}  {seconds:.2f} s/round")


def _import_plotting_meanwhile(run_dir: str) -> None:
    """Import matplotlib (a second of CPU) in a thread while the rounds run, the driver mostly waiting for them,
    so that the accuracy plot at the end only draws. A failure shows when the plot imports it again."""
    if storage.is_remote(run_dir):
        return
    from orchestrator.plots import import_pyplot

    def quietly() -> None:
        with suppress(Exception):
            import_pyplot()

    # not a daemon: the interpreter ending a daemon thread inside an extension's C++ init (an early exit) aborts
    threading.Thread(target=quietly, name="mooring-import-matplotlib").start()


def _finish_artifacts(cfg, result: RunResult, final_state, log: RunLog, tracker: Tracker) -> None:
    """The accuracy plot, the final global state and the resolved config, in the run dir and in MLflow;
    for anchor and prototype methods also the anchors and a PNG of their pairwise cosine similarities."""
    from orchestrator.plots import experiment_title, has_clock, plot_against_time, plot_comparison

    if storage.is_remote(log.run_dir):
        return
    run_dir = Path(log.run_dir)
    plot_comparison({cfg.algorithm.block_name: result.history}, run_dir / "accuracy.png",
                    title=experiment_title(cfg, [cfg.seed], cfg.algorithm.block_name))
    storage.write_bytes_atomic(str(run_dir / "final_state.pt"), storage.torch_bytes(final_state))
    names = ["config.yaml", "accuracy.png", "final_state.pt", "metrics.jsonl", "result.json"]
    if has_clock({cfg.algorithm.block_name: result.history}):
        plot_against_time({cfg.algorithm.block_name: result.history}, run_dir / "accuracy_time.png",
                          title=experiment_title(cfg, [cfg.seed], cfg.algorithm.block_name))
        names.append("accuracy_time.png")
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
    return build_config(*raw_config_for_run(config_path, overrides, resume))


def raw_config_for_run(config_path: str | None, overrides: list[str],
                       resume: str | None) -> tuple[dict[str, Any], str]:
    """The config file (or the resumed run's) read, with `overrides` applied, and its source: every error of the
    file and the overrides' syntax, in milliseconds; `build_config` then checks the values (importing torch and
    every model and algorithm, for their options)."""
    if resume:
        return raw_run_config(resume, overrides)
    if config_path is None:
        raise ConfigError("mooring run: give a CONFIG file (or --resume RUN_DIR)")
    from orchestrator.config import apply_overrides, read_yaml

    return apply_overrides(read_yaml(config_path), list(overrides)), str(config_path)
