"""A run's MLflow tracking in a process of its own, for `mooring run`: MLflow's import and the store's opening
(about two CPU seconds, more on a new store) then take the machine's second core while the driver imports torch
and prepares the data, instead of the driver's own (benchmarks/README.md, "Whole run"). The child process is
started first thing (`TrackerProcess.launch`), imports MLflow while the command reads its config, and then
serves one orchestrator/reporting/tracking.py `Tracker`: the driver's `TrackerProcess` has the same methods and
forwards each call over a pipe. Metrics are sent without waiting, gathered for SEND_SECONDS (the child writes
each message's at once and answers it once written); every other call waits for the child's answer, so what the
driver reads back (the run's id, its logged steps) is the store's, and `flush` and `end` return once written. Whatever the child reports (its Tracker disabled
after a failure, with the warning printed by the child) the driver's copy follows.

No wait on the child is unbounded: the driver's messages go out from a thread of their own (a stopped child,
whose pipe is full, blocks that thread, not the run), and an answer is waited for at most
MOORING_TRACKING_TIMEOUT seconds (`DEFAULT_TIMEOUT_SECONDS`; `SETUP_SECONDS` at least for MLflow's import and a
new store's tables), STOP_GRACE_SECONDS once a stop signal has come. A child that does not answer in time
(stopped, hung) or that ended is killed, tracking is off for the rest of the run in one warning, and the calls it
never carried out are kept: `end` carries them out from the driver's own process, so the MLflow run still gets
every round's metrics, its summary and artifacts, and its final status, with a `mlflow_tracking_lost` tag
saying why.

By job: tracker_child.py (the child process: started, serving a Tracker, ended or killed), tracker_channel.py (the
pipe's calls and answers within their deadlines), tracker_replay.py (a lost child's calls carried out here); here,
the Tracker's methods and the metrics gathered between sends."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.reporting.tracker_channel import (  # noqa: F401  (re-exported)
    DEFAULT_TIMEOUT_SECONDS,
    SETUP_CALLS,
    SETUP_SECONDS,
    STOP_GRACE_SECONDS,
    TIMEOUT_ENV,
    Call,
    TrackerChannel,
    answer_timeout,
)
from orchestrator.reporting.tracker_child import (  # noqa: F401  (re-exported)
    SPAWN,
    join_child,
    kill_child,
    serve,
    spawn_child,
    state_of,
)
from orchestrator.reporting.tracker_replay import REPLAYED, complete_here, made_before  # noqa: F401  (re-exported)


class TrackerProcess:
    """The Tracker's methods, carried out by the child process (see the module's docstring)."""

    SEND_SECONDS = 2.0  # metrics go to the child in one message at most this often (and before any other call)

    def __init__(self, conn, process, timeout: float = DEFAULT_TIMEOUT_SECONDS):
        self.process, self.timeout = process, timeout
        self.enabled, self.run_id, self.experiment_id, self.uri = True, None, None, ""
        # set by the run: whether a stop signal has come (an answer is then waited for STOP_GRACE_SECONDS at most)
        self.stop_requested = lambda: False
        self._pending: list[tuple[dict[str, Any], int]] = []
        self._last_send = time.monotonic()
        self._configured: tuple | None = None  # configure's arguments, for a Tracker here if the child is lost
        self._replay: list[Call] | None = None  # once lost: the calls the child never carried out, if any are due
        self.channel = TrackerChannel(conn, timeout, lambda: self.stop_requested(), self._take_state, self._lose)

    @classmethod
    def launch(cls) -> TrackerProcess:
        """The child started; it imports MLflow while the caller goes on."""
        timeout = answer_timeout()
        conn, process = spawn_child()
        return cls(conn, process, timeout)

    def configure(self, uri: str | None, experiment: str, enabled: bool = True) -> TrackerProcess:
        """The Tracker the child serves (orchestrator/reporting/tracking.py's arguments)."""
        self._configured = (uri, experiment, enabled)
        self._ask("__init__", uri, experiment, enabled)
        return self

    @property
    def lost(self) -> str | None:
        """Why the child was given up, once it was."""
        return self.channel.lost

    # ------------------------------------------------------------------------------------ the channel's side
    def _ask(self, name: str, *args, **kwargs):
        self._send_metrics()
        number = self._post(name, args, kwargs)
        return None if number is None else self.channel.answer(number)

    def _post(self, name: str, args: tuple, kwargs: dict) -> int | None:
        """The call sent; its number. Once the child is lost: kept for `_complete_here` where that is due, and
        None."""
        if self.lost is not None:
            if self._replay is not None:
                self._replay.append((name, args, kwargs))
            return None
        return self.channel.post(name, args, kwargs)

    def _take_state(self, state: dict[str, Any]) -> None:
        """The child's Tracker state an answer carries (enabled, run and experiment ids, uri), followed here."""
        for key, got in state.items():
            setattr(self, key, got)

    def _lose(self, why: str, unanswered: list[Call]) -> None:
        """The child killed and tracking off for the rest of the run, said once; where the child's Tracker was
        tracking, what it never carried out is kept for `end` to do here."""
        due = self.enabled and self._configured is not None and self._configured[2]
        self._replay = unanswered if due else None
        self.enabled = False
        process, self.process = self.process, None
        if process is not None:
            kill_child(process)
        then = ("what it had not written goes to the MLflow run when the run ends (metrics are in the run directory "
                "meanwhile)" if due else "metrics are still in the run directory")
        print(f"warning: MLflow tracking off for this run: {why}; {then}", file=sys.stderr)

    # ------------------------------------------------------------------------------------------ a Tracker's calls
    def open(self) -> None:
        self._ask("open")

    def start(self, run_name: str, params: dict[str, Any], tags: dict[str, str], parent_run_id: str | None = None,
              resume_run_id: str | None = None) -> str | None:
        return self._ask("start", run_name, params, tags, parent_run_id=parent_run_id, resume_run_id=resume_run_id)

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        """Kept here and sent with the others every SEND_SECONDS: where the coordinator runs in this process, a
        message a round would take its interpreter lock a round (benchmarks/README.md, "Tiny clients")."""
        if (self.run_id is not None and self.enabled) or self._replay is not None:
            self._pending.append((metrics, step))
            if time.monotonic() - self._last_send >= self.SEND_SECONDS:
                self._send_metrics()

    def _send_metrics(self) -> None:
        pending, self._pending, self._last_send = self._pending, [], time.monotonic()
        if pending:
            self._post("log_metrics_batch", (pending,), {})
        if self.lost is None:
            self.channel.check_in()

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
        if self.lost is not None:
            self._complete_here(status)

    def end_running_children(self, status: str = "KILLED") -> None:
        self._ask("end_running_children", status)

    def _complete_here(self, status: str) -> None:
        """The child lost: what it never carried out done by a Tracker in this process (tracker_replay.py)."""
        calls, self._replay = self._replay, None
        if calls is None:
            return
        self.run_id, self.experiment_id = complete_here(calls, self._configured, self.uri,
                                                        (self.run_id, self.experiment_id), self.lost, status)

    def close(self) -> None:
        """The child ends (it sees the pipe close) once it has done what was sent; one that does not (stopped,
        hung) is killed."""
        self._send_metrics()
        self.channel.close(child_alive=self.process is not None)
        if self.process is not None:
            join_child(self.process)
