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
saying why."""
from __future__ import annotations

import multiprocessing
import os
import queue
import sys
import threading
import time
from collections import deque
from contextlib import suppress
from pathlib import Path
from typing import Any

SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of the driver's threads or torch

TIMEOUT_ENV = "MOORING_TRACKING_TIMEOUT"
DEFAULT_TIMEOUT_SECONDS = 60.0
# the first answers include MLflow's import and a new store's tables, which one process at a time makes (another
# run's making them is waited for): at least this long, whatever the timeout
SETUP_SECONDS = 120.0
SETUP_CALLS = frozenset({"__init__", "open", "start"})
# once a stop signal has come, an answer is waited for at most this long (a child that answers ends its run KILLED)
STOP_GRACE_SECONDS = 5.0
# the calls a Tracker in the driver's process carries out again for a child that never did (`_complete_here`)
REPLAYED = frozenset({"open", "log_summary", "log_table", "flush", "set_tags", "log_artifact", "end_running_children"})


def answer_timeout() -> float:
    """MOORING_TRACKING_TIMEOUT's seconds (DEFAULT_TIMEOUT_SECONDS where unset); anything but a positive number is
    refused."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        from orchestrator.experiment.config import ConfigError

        raise ConfigError(f"{TIMEOUT_ENV}={raw}: the seconds an answer from MLflow tracking's process is waited for "
                          "must be a positive number")
    return seconds


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


class TrackerProcess:
    """The Tracker's methods, carried out by the child process (see the module's docstring)."""

    SEND_SECONDS = 2.0  # metrics go to the child in one message at most this often (and before any other call)

    def __init__(self, conn, process, timeout: float = DEFAULT_TIMEOUT_SECONDS):
        self.conn, self.process, self.timeout = conn, process, timeout
        self.enabled, self.run_id, self.experiment_id, self.uri = True, None, None, ""
        self.lost: str | None = None  # why the child was given up, once it was
        # set by the run: whether a stop signal has come (an answer is then waited for STOP_GRACE_SECONDS at most)
        self.stop_requested = lambda: False
        self._pending: list[tuple[dict[str, Any], int]] = []
        self._last_send = time.monotonic()
        self._number = 0
        # messages sent and not answered yet: (number, deadline for its answer, (name, args, kwargs))
        self._unanswered: deque[tuple[int, float, tuple]] = deque()
        self._configured: tuple | None = None  # configure's arguments, for a Tracker here if the child is lost
        self._replay: list[tuple] | None = None  # once lost: the calls the child never carried out, if any are due
        self._hurry_since: float | None = None
        self._interrupted = False  # a wait for an answer was interrupted (Ctrl-C, a signal outside the rounds)
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send_loop, name="mooring-tracking-send", daemon=True)
        self._sender.start()

    @classmethod
    def launch(cls) -> TrackerProcess:
        """The child started; it imports MLflow while the caller goes on."""
        timeout = answer_timeout()
        ours, theirs = SPAWN.Pipe()
        process = SPAWN.Process(target=serve, args=(theirs,), name="mooring-tracking", daemon=True)
        process.start()
        theirs.close()
        return cls(ours, process, timeout)

    def configure(self, uri: str | None, experiment: str, enabled: bool = True) -> TrackerProcess:
        """The Tracker the child serves (orchestrator/reporting/tracking.py's arguments)."""
        self._configured = (uri, experiment, enabled)
        self._ask("__init__", uri, experiment, enabled)
        return self

    # ---------------------------------------------------------------------------------------------- the pipe
    def _send_loop(self) -> None:
        """The sending thread: one message after another, as long as the child takes them."""
        while (data := self._outbox.get()) is not None:
            try:
                self.conn.send_bytes(data)
            except (OSError, ValueError):  # the child is gone; its unanswered calls are kept (`_give_up`)
                return

    def _post(self, name: str, args: tuple, kwargs: dict) -> int | None:
        """The call sent (pickled here, so that a bad argument fails in the caller); its number. Once the child is
        lost: kept for `_complete_here` where that is due, and None."""
        from multiprocessing.reduction import ForkingPickler

        if self.lost is not None:
            if self._replay is not None:
                self._replay.append((name, args, kwargs))
            return None
        self._number += 1
        data = ForkingPickler.dumps((self._number, name, args, kwargs))
        self._unanswered.append((self._number, time.monotonic() + self._patience(name), (name, args, kwargs)))
        self._outbox.put(data)
        return self._number

    def _patience(self, name: str) -> float:
        return max(self.timeout, SETUP_SECONDS) if name in SETUP_CALLS else self.timeout

    def _ask(self, name: str, *args, **kwargs):
        self._send_metrics()
        number = self._post(name, args, kwargs)
        if number is None:
            return None
        while self.lost is None:
            deadline = self._unanswered[0][1] if self._unanswered else time.monotonic()
            if self._hurrying():
                deadline = min(deadline, self._hurry_since + STOP_GRACE_SECONDS)
            wait = deadline - time.monotonic()
            if wait <= 0:
                self._give_up(self._overdue())
                return None
            try:
                ready = self.conn.poll(min(wait, 0.25))
            except OSError:
                ready = True  # read below: ends as the child's end
            except BaseException:
                self._interrupted = True
                raise
            if not ready:
                continue
            answer = self._receive()
            if answer is not None and answer[0] == number:
                _, value, error = answer
                if error is not None:
                    raise RuntimeError(f"MLflow tracking's process: {error}")
                return value
        return None

    def _overdue(self) -> str:
        """Why the child is given up, its oldest unanswered call being overdue."""
        patience = self._patience(self._unanswered[0][2][0] if self._unanswered else "")
        if self._hurry_since is not None and STOP_GRACE_SECONDS < patience:
            return f"its process did not answer within {STOP_GRACE_SECONDS:g} s of the stop signal"
        return f"its process did not answer in {patience:g} s"

    def _hurrying(self) -> bool:
        if self._hurry_since is None and (self._interrupted or self.stop_requested()):
            self._hurry_since = time.monotonic()
        return self._hurry_since is not None

    def _receive(self) -> tuple[int, Any, str | None] | None:
        """One answer (the poll said one is there): the child's state it carries applied, the calls up to it
        answered; (number, value, error), or None where the child is gone."""
        try:
            number, value, state, error = self.conn.recv()
        except (EOFError, OSError):
            self._give_up("its process ended")
            return None
        except Exception as e:  # noqa: BLE001 - an answer torn by an interrupted read: the pipe is unusable
            self._give_up(f"its answer could not be read ({type(e).__name__})")
            return None
        except BaseException:  # interrupted part-way through an answer: the rest of it would be read as the next
            self._interrupted = True
            self._give_up("its answer was interrupted")
            raise
        while self._unanswered and self._unanswered[0][0] <= number:
            self._unanswered.popleft()
        for key, got in state.items():
            setattr(self, key, got)
        return number, value, error

    def _check_in(self) -> None:
        """Without waiting: the answers already there read, and the child given up if the oldest call it has not
        answered is past its deadline (a stopped child, found during the rounds)."""
        while self.lost is None and self._unanswered:
            try:
                ready = self.conn.poll(0)
            except OSError:
                ready = True  # read below: ends as the child's end
            if not ready:
                break
            self._receive()
        if self.lost is None and self._unanswered and time.monotonic() > self._unanswered[0][1]:
            self._give_up(self._overdue())

    def _give_up(self, why: str) -> None:
        """The child killed (SIGKILL ends a stopped process too) and tracking off for the rest of the run, said once;
        where the child's Tracker was tracking, what it never carried out is kept for `end` to do here."""
        if self.lost is not None:
            return
        self.lost = why
        due = self.enabled and self._configured is not None and self._configured[2]
        self._replay = [call for _, _, call in self._unanswered] if due else None
        self._unanswered.clear()
        self.enabled = False
        process, self.process = self.process, None
        if process is not None:
            with suppress(Exception):
                process.kill()
                process.join(timeout=10)
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
            self._check_in()

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
        """The child lost: what it never carried out (rounds' metrics, the summary, artifacts, tags) done by a
        Tracker in this process, and the MLflow run ended `status`, tagged with why tracking was lost. Metrics the
        child wrote without answering are not written twice (their rounds are in the store)."""
        from orchestrator.reporting.tracking import Tracker

        calls, self._replay = self._replay, None
        if calls is None:
            return
        uri, experiment, enabled = self._configured
        tracker = Tracker(self.uri or uri, experiment, enabled)
        tracker.run_id, tracker.experiment_id = self.run_id, self.experiment_id
        logged = tracker.logged_steps("round")
        for name, args, kwargs in calls:
            if name == "log_metrics_batch":
                for metrics, step in args[0]:
                    if not ("round" in metrics and step in logged):
                        tracker.log_metrics(metrics, step)
            elif name == "start" and tracker.run_id is None:
                made = kwargs.get("resume_run_id") or made_before(tracker, args[2])
                tracker.start(*args, **{**kwargs, "resume_run_id": made})
            elif name in REPLAYED:
                getattr(tracker, name)(*args, **kwargs)
        tracker.set_tags({"mlflow_tracking_lost": self.lost})
        tracker.end(status)
        self.run_id, self.experiment_id = tracker.run_id, tracker.experiment_id

    def close(self) -> None:
        """The child ends (it sees the pipe close) once it has done what was sent; one that does not (stopped,
        hung) is killed."""
        self._send_metrics()
        self._outbox.put(None)
        if self.process is not None:
            self._sender.join(timeout=STOP_GRACE_SECONDS if self._hurrying() else self.timeout)
            if self._sender.is_alive():  # stuck on a child that takes nothing
                self._give_up("its process took no more messages")
        self._sender.join(timeout=10)
        self.conn.close()
        if self.process is not None:
            self.process.join(timeout=10)
            if self.process.is_alive():
                with suppress(Exception):
                    self.process.kill()
                    self.process.join(timeout=10)


def made_before(tracker, tags: dict[str, str]) -> str | None:
    """The MLflow run a lost child may have made before it stopped answering `start`: this run directory's run,
    still RUNNING (a run directory is one run's)."""
    run_dir = tags.get("run_dir")
    tracker.open()
    if not run_dir or "'" in run_dir or tracker.experiment_id is None:
        return None
    try:
        found = tracker.client.search_runs(
            [tracker.experiment_id], f"tags.run_dir = '{run_dir}' and attributes.status = 'RUNNING'", max_results=1)
    except Exception:  # noqa: BLE001 - none found: a new MLflow run is made
        return None
    return found[0].info.run_id if found else None
