"""A run's MLflow tracking in a process of its own, for `mooring run`: MLflow's import and the store's opening
(about two CPU seconds, more on a new store) then take the machine's second core while the driver imports torch
and prepares the data, instead of the driver's own (benchmarks/README.md, "Whole run"). The child process is
started first thing (`TrackerProcess.launch`), imports MLflow while the command reads its config, and then
serves one orchestrator/reporting/tracking.py `Tracker`: the driver's `TrackerProcess` has the same methods and
forwards each call over a pipe. Metrics are sent without waiting (the child buffers them as a Tracker does);
every other call waits for the child's answer, so what the driver reads back (the run's id, its logged steps)
is the store's, and `flush` and `end` return once written. Whatever the child reports (its Tracker disabled
after a failure, with the warning printed by the child) the driver's copy follows."""
from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of the driver's threads or torch


def serve(conn) -> None:
    """The child: MLflow imported at once, then one Tracker built from the first message and driven by the rest,
    until the driver closes the pipe (or exits). Ctrl-C in a terminal reaches the whole process group: the child
    leaves it to the driver, which ends the MLflow run KILLED through it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import mlflow  # noqa: F401 - imported while the driver starts: the point of this process
    from mlflow.tracking import MlflowClient  # noqa: F401

    from orchestrator.reporting.tracking import Tracker

    tracker = None
    while True:
        try:
            name, args, kwargs, wants_answer = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if name == "__init__":
                tracker, value = Tracker(*args, **kwargs), None
            elif name == "log_metrics_batch":
                for metrics, step in args[0]:
                    tracker.log_metrics(metrics, step)
                value = None
            else:
                value = getattr(tracker, name)(*args, **kwargs)
            answer = (value, state_of(tracker), None)
        except Exception as e:  # noqa: BLE001 - a Tracker disables itself on MLflow's errors; anything else goes back
            answer = (None, state_of(tracker), f"{type(e).__name__}: {e}")
        if wants_answer:
            conn.send(answer)


def state_of(tracker) -> dict[str, Any]:
    if tracker is None:
        return {}
    return {"enabled": tracker.enabled, "run_id": tracker.run_id, "experiment_id": tracker.experiment_id,
            "uri": tracker.uri}


class TrackerProcess:
    """The Tracker's methods, carried out by the child process (see the module's docstring)."""

    SEND_SECONDS = 2.0  # metrics go to the child in one message at most this often (and before any other call)

    def __init__(self, conn, process):
        self.conn, self.process = conn, process
        self.enabled, self.run_id, self.experiment_id, self.uri = True, None, None, ""
        self._pending: list[tuple[dict[str, Any], int]] = []
        self._last_send = time.monotonic()

    @classmethod
    def launch(cls) -> TrackerProcess:
        """The child started; it imports MLflow while the caller goes on."""
        ours, theirs = SPAWN.Pipe()
        process = SPAWN.Process(target=serve, args=(theirs,), name="mooring-tracking", daemon=True)
        process.start()
        theirs.close()
        return cls(ours, process)

    def configure(self, uri: str | None, experiment: str, enabled: bool = True) -> TrackerProcess:
        """The Tracker the child serves (orchestrator/reporting/tracking.py's arguments)."""
        self._ask("__init__", uri, experiment, enabled)
        return self

    def _ask(self, name: str, *args, **kwargs):
        self._send_metrics()
        if not self._send((name, args, kwargs, True)):
            return None
        try:
            value, state, error = self.conn.recv()
        except (EOFError, OSError):
            return self._lost()
        for key, got in state.items():
            setattr(self, key, got)
        if error is not None:
            raise RuntimeError(f"MLflow tracking's process: {error}")
        return value

    def open(self) -> None:
        self._ask("open")

    def start(self, run_name: str, params: dict[str, Any], tags: dict[str, str], parent_run_id: str | None = None,
              resume_run_id: str | None = None) -> str | None:
        return self._ask("start", run_name, params, tags, parent_run_id=parent_run_id, resume_run_id=resume_run_id)

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        """Kept here and sent with the others every SEND_SECONDS: where the coordinator runs in this process, a
        message a round would take its interpreter lock a round (benchmarks/README.md, "Tiny clients")."""
        if self.run_id is not None and self.enabled:
            self._pending.append((metrics, step))
            if time.monotonic() - self._last_send >= self.SEND_SECONDS:
                self._send_metrics()

    def _send_metrics(self) -> None:
        pending, self._pending, self._last_send = self._pending, [], time.monotonic()
        if pending:
            self._send(("log_metrics_batch", (pending,), {}, False))

    def _send(self, message) -> bool:
        if self.process is None:  # lost before: tracking is off for this run
            return False
        try:
            self.conn.send(message)
        except OSError:
            self._lost()
            return False
        return True

    def _lost(self) -> None:
        """The child is gone (killed, out of memory): tracking off for the rest of the run, as a Tracker turns
        itself off after a failure, said once; the run goes on (its metrics are in the run directory)."""
        if self.process is not None:
            import sys

            print("warning: MLflow tracking off for this run: its process ended; metrics are still in the run "
                  "directory", file=sys.stderr)
        self.enabled, self.process = False, None

    def logged_steps(self, key: str = "round") -> set[int]:
        return self._ask("logged_steps", key) or set()  # none where the child is gone, as a disabled Tracker

    def log_summary(self, summary: dict[str, Any], step: int = 0) -> None:
        self._ask("log_summary", summary, step=step)

    def log_table(self, rows: list[dict[str, Any]], artifact_file: str) -> None:
        self._ask("log_table", rows, artifact_file)

    def flush(self) -> None:
        self._ask("flush")

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._ask("set_tags", tags)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._ask("log_artifact", path, artifact_path)

    def end(self, status: str = "FINISHED") -> None:
        self._ask("end", status)

    def end_running_children(self, status: str = "KILLED") -> None:
        self._ask("end_running_children", status)

    def close(self) -> None:
        """The child ends (it sees the pipe close) once it has done what was sent."""
        self._send_metrics()
        self.conn.close()
        if self.process is not None:
            self.process.join(timeout=10)
