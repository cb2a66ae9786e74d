"""MLflow tracking's child process: spawned to import MLflow at once and serve one Tracker over its end of the pipe
(`serve`), and ended or killed from the driver's side."""
from __future__ import annotations

import multiprocessing
from contextlib import suppress
from typing import Any

SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of the driver's threads or torch


def spawn_child():
    """(the driver's end of the pipe, the child process started); the child imports MLflow while the caller goes
    on."""
    ours, theirs = SPAWN.Pipe()
    process = SPAWN.Process(target=serve, args=(theirs,), name="mooring-tracking", daemon=True)
    process.start()
    theirs.close()
    return ours, process


def kill_child(process) -> None:
    """SIGKILL, which ends a stopped process too, and the child reaped."""
    with suppress(Exception):
        process.kill()
        process.join(timeout=10)


def join_child(process) -> None:
    """The child ended once it has done what was sent (it sees the pipe close); one that does not is killed."""
    process.join(timeout=10)
    if process.is_alive():
        kill_child(process)


def serve(conn) -> None:
    """The child: MLflow imported at once, then one Tracker built from the first message and driven by the rest,
    until the driver closes the pipe (or exits). Ctrl-C in a terminal reaches the whole process group: the child
    leaves it to the driver, which ends the MLflow run KILLED through it. Every message is answered with its
    number (metrics too: the driver then knows what was written)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import mlflow  # noqa: F401 - imported while the driver starts: the point of this process
    from mlflow.tracking import MlflowClient  # noqa: F401

    from orchestrator.reporting.tracking import Tracker

    tracker = None
    while True:
        try:
            number, name, args, kwargs = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if name == "__init__":
                tracker, value = Tracker(*args, **kwargs), None
            elif name == "log_metrics_batch":
                for metrics, step in args[0]:
                    tracker.log_metrics(metrics, step)
                tracker.flush()  # answered once written: what a lost child answered is in the store
                value = None
            else:
                value = getattr(tracker, name)(*args, **kwargs)
            answer = (value, state_of(tracker), None)
        except Exception as e:  # noqa: BLE001 - a Tracker disables itself on MLflow's errors; anything else goes back
            answer = (None, state_of(tracker), f"{type(e).__name__}: {e}")
        try:
            conn.send((number, *answer))
        except OSError:  # the driver is gone
            return


def state_of(tracker) -> dict[str, Any]:
    if tracker is None:
        return {}
    return {"enabled": tracker.enabled, "run_id": tracker.run_id, "experiment_id": tracker.experiment_id,
            "uri": tracker.uri}
