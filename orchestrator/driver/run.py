"""One federated run, driven from here: the coordinator runs rounds, this process tracks them. The coordinator is a Ray
actor, or, for a run given no Ray cluster whose clients all train in it, an object in this process and no Ray is
started (orchestrator/driver/local_coordinator.py).

    run_experiment(cfg) → RunResult
      ├─ connect to (or start) Ray where the run needs it, while the data and its partition are loaded in the
      │  background
      ├─ CoordinatorActor(cfg) → ClientActor × K start; meanwhile the data goes into the object store and MLflow
      │  opens the run; coordinator.start(data) loads the actors                       (orchestrator/driver/run_start.py)
      ├─ after set-up: actors.json (node, pid, assigned resources of each client actor); at the end again,
      │  with the devices its data and models were on and its peak CUDA memory
      ├─ coordinator.run_rounds(n), n rounds a call (about 50 ms of them) → each one's metrics → metrics.jsonl,
      │  MLflow, progress bar
      ├─ every checkpoint.every rounds: coordinator.checkpoint()                        (orchestrator/driver/round_loop.py)
      └─ at the end: result.json, accuracy plot, final global state, MLflow artifacts  (orchestrator/reporting/artifacts.py)
    Every phase is timed (orchestrator/phases.py; `mooring run --profile`). The run directory's files are
    orchestrator/driver/run_dir.py's, the result orchestrator/reporting/results.py's, the signals orchestrator/driver/signals.py's.
"""
from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext, suppress

from orchestrator.driver import resume_config
from orchestrator.driver.local_coordinator import end as end_coordinator
from orchestrator.driver.local_coordinator import get
from orchestrator.driver.round_loop import backfill_tracking, run_rounds
from orchestrator.driver.run_context import RoundRecord, RunContext, RunRequest
from orchestrator.driver.run_dir import RunLog, check_output_dirs, new_run_dir, resume_snapshot, strict_json
from orchestrator.driver.run_errors import (
    CoordinatorCallError,
    RunError,
    coordinator_lost,
    disk_full,
    failed,
    ray_exception,
    resume_hint,
)
from orchestrator.driver.run_start import set_up
from orchestrator.driver.signals import RunInterrupted, StopSignals
from orchestrator.experiment.config import ExperimentConfig
from orchestrator.experiment.method_settings import optimizer_note
from orchestrator.io import run_lock, storage
from orchestrator.io.history_codec import decoded
from orchestrator.phases import Phases
from orchestrator.reporting.artifacts import finish_artifacts
from orchestrator.reporting.results import RunResult, summarize, summary_metrics
from orchestrator.reporting.tracking import Tracker


def run_experiment(cfg: ExperimentConfig, *, address: str | None = None, resume_dir: str | None = None,
                   progress: bool = True, parent_run_id: str | None = None, on_round=None,
                   stop_after: int | None = None, run_dir: str | None = None,
                   from_round: int | None = None, data=None, tracker=None, run_name: str | None = None) -> RunResult:
    """Run (or resume) one experiment. `on_round(metrics)` may raise to stop it (sweeps prune this way);
    `stop_after` stops after that many rounds in total, leaving a checkpoint (for resume tests);
    `from_round` resumes from that round's checkpoint instead of the latest; `data`, a Future of the
    FederatedData of `prepare_data(cfg)` being prepared already (`mooring run` starts it while Ray starts);
    `tracker`, a TrackerProcess launched already to track the run from a process of its own (`mooring run`);
    `run_name`, its MLflow run's name (default CONFIG-METHOD-sSEED).

    SIGINT/SIGTERM (in the main thread) end the rounds in flight (or abandon one after ROUND_GRACE_SECONDS),
    write a checkpoint, end the MLflow run KILLED and raise RunInterrupted. A run that fails during set-up
    leaves no run directory behind (unless it was resumed) and ends its MLflow run FAILED."""
    request = RunRequest(cfg, address, resume_dir, progress, parent_run_id, on_round, stop_after, run_dir,
                         from_round, data, tracker, run_name)
    note = optimizer_note(cfg)  # a plain-SGD method under momentum: its documented adjustment, in one line
    if note and progress:
        print(f"note: {note}", file=sys.stderr)
    from orchestrator.server.robust_round import robustness_note

    note = robustness_note(cfg)  # a robust aggregator or an attack on the updates turns partial sums off
    if note and progress:
        print(f"note: {note}", file=sys.stderr)
    with StopSignals() as stop:
        if tracker is not None:  # its waits for the tracking process end sooner once a stop signal has come
            tracker.stop_requested = lambda: stop.seen
        return _run(request, stop)


def _run(request: RunRequest, stop: StopSignals) -> RunResult:
    """The run, holding its directory's lock throughout; a full disk is one line with the way on."""
    cfg = request.cfg
    check_output_dirs(cfg)
    run_dir = request.resume_dir or request.run_dir or new_run_dir(cfg)
    try:
        with run_lock.holding(run_dir):
            if request.resume_dir:
                resume_config.check_unchanged(request.resume_dir, cfg)
            snapshot = resume_snapshot(request.resume_dir, request.from_round, cfg) if request.resume_dir else None
            return _run_holding(RunContext(request, RunLog(run_dir), stop, Phases(), snapshot))
    except run_lock.RunDirInUse as e:
        raise RunError(str(e)) from None
    except OSError as e:
        full = disk_full(run_dir, e)
        if full is None:
            raise
        raise full from None


def _run_holding(ctx: RunContext) -> RunResult:
    t0 = time.perf_counter()
    coordinator, tracker = _start(ctx)
    startup = sum(ctx.phases.as_dict().get("start: Ray", []))
    history = decoded(ctx.snapshot["history"]) if ctx.snapshot else []
    record = RoundRecord(history, backfill_tracking(tracker, ctx.log, len(history)) if ctx.resumed else set())
    status, final_state, interrupted, result = _rounds(ctx, coordinator, tracker, record, lambda: summarize(
        ctx.cfg, record.history, wall_seconds=time.perf_counter() - t0, mlflow_run_id=tracker.run_id,
        run_dir=ctx.log.run_dir, round_seconds=record.round_seconds,
        coordinator_round_seconds=record.coordinator_seconds, startup_seconds=startup))
    if interrupted is not None:
        tracker.end("KILLED")
        raise RunInterrupted(interrupted, ctx.stop.signum)
    try:
        with ctx.phases("end: artifacts"):
            finish_artifacts(ctx.cfg, result, final_state, ctx.log.run_dir, tracker)
        with ctx.phases("end: MLflow"):
            summary = summary_metrics(record.history, ctx.cfg.participation.target_accuracy)
            tracker.log_summary(summary | {"wall_seconds": result.wall_seconds, "rounds": len(record.history)},
                                step=len(record.history))
            tracker.end(status)
    except BaseException as e:  # a signal or a failure after the rounds: the MLflow run is not left RUNNING
        tracker.end("KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED")
        raise
    result.phases = ctx.phases.as_dict()
    return result


def _start(ctx: RunContext):
    """The run set up (orchestrator/driver/run_start.py): (coordinator, tracker). A fresh run that fails here leaves no
    run directory; a Ray failure is one line."""
    try:
        return set_up(ctx)
    except BaseException as e:
        if not ctx.resumed:
            storage.remove_tree(ctx.log.run_dir)
        if isinstance(e, (CoordinatorCallError, ray_exception("RayError"))):
            raise failed("the run could not start", e, "start the run again") from None
        raise


def _rounds(ctx: RunContext, coordinator, tracker: Tracker, record: RoundRecord, result_now):
    """The rounds, then the final state: (MLflow status, final state, stop message or None, result). Whatever happens,
    result.json is written (from `result_now()`, with the failure's details if any) and the coordinator ends; a
    failure ends the MLflow run FAILED, with its details as tags, and is one line (a method's fault adds the
    traceback's last frames below it)."""
    run_dir, history = ctx.log.run_dir, record.history
    status, final_state, interrupted, error = "FAILED", None, None, None
    try:
        ctx.stop.in_rounds = True
        interrupted = run_rounds(ctx, coordinator, tracker, record)
        if interrupted is None:
            final_state = _final_state(ctx, coordinator)
        status = "FINISHED" if len(history) == ctx.cfg.train.rounds else "KILLED"
    except ray_exception("RayActorError") as e:
        error = RunError(coordinator_lost(run_dir, len(history), e))
        end_failed(tracker, error)
        raise error from None
    except (CoordinatorCallError, ray_exception("RayTaskError")) as e:
        error = disk_full(run_dir, e) or failed(f"round {len(history) + 1} failed", e, resume_hint(run_dir))
        end_failed(tracker, error)
        raise error from None
    except KeyboardInterrupt:
        tracker.end("KILLED")
        raise RunInterrupted(f"stopped during round {len(history) + 1}; {resume_hint(run_dir)}",
                             ctx.stop.signum or 2) from None
    except BaseException:
        tracker.end("FAILED")
        raise
    finally:
        ctx.stop.in_rounds = False
        result = result_now()
        result.error = error.details if error is not None else None
        end_coordinator(coordinator)
        # a full disk here must not hide the error already on its way out
        with suppress(OSError) if sys.exc_info()[1] is not None else nullcontext():
            ctx.log.write("result.json", strict_json(result.to_json(), indent=1))
    return status, final_state, interrupted, result


def end_failed(tracker: Tracker, error: RunError) -> None:
    """The MLflow run ended FAILED, with what failed as tags: the line, and a method's fault's hook, clients,
    round and frames."""
    fault = error.fault
    tracker.set_tags({"error": str(error)[:5000]} | ({
        "error.method": fault.method, "error.hook": fault.hook, "error.round": fault.round,
        "error.clients": ",".join(map(str, fault.clients)) or "server"} if fault else {}))
    tracker.end("FAILED")


def _final_state(ctx: RunContext, coordinator):
    """actors.json again, now with where the tensors lived (data and model devices, peak CUDA memory); the
    coordinator's phase timings; and the final global state."""
    ctx.log.write("actors.json", json.dumps(get(coordinator.actor_info.remote(timeout=30.0)), indent=1))
    with ctx.phases("end: final state"):
        final_state = get(coordinator.final_state.remote())
    ctx.phases.merge(get(coordinator.phases.remote()))
    return final_state
