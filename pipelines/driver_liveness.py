"""Which drivers of a study live: each beats a heartbeat in the study and writes its id on the trials it runs, so a
trial left RUNNING by a driver that is gone is recognised, failed (its reason recorded) and enqueued again."""
from __future__ import annotations

import os
import socket
import time
from typing import Any

from pipelines.study_trials import StudyTrials
from pipelines.trial_store import TrialStore

DRIVER_GRACE_SECONDS = 120.0  # a driver silent this long (heartbeat) is taken for gone
HEARTBEAT_SECONDS = 15.0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, and another user's
        pass
    return True


class DriverLiveness:
    """One driver's heartbeat in its study, and the trials nobody runs any more, failed and enqueued again."""

    def __init__(self, study, store: TrialStore, trials: StudyTrials, driver_id: str, echo):
        self.study, self.store, self.trials, self.id, self.echo = study, store, trials, driver_id, echo
        self.last_beat = 0.0

    def heartbeat(self, force: bool = False) -> None:
        now = time.time()
        if force or now - self.last_beat >= HEARTBEAT_SECONDS:
            self.study.set_user_attr(f"driver:{self.id}", now)
            self.last_beat = now

    def stale_reason(self, trial, attrs: dict[str, Any], now: float) -> str | None:
        """Why a RUNNING trial has nobody running it, or None while its driver lives."""
        driver = trial.user_attrs.get("driver")
        if driver == self.id:
            return None
        if driver is None:
            return self.unnamed_reason(trial, attrs, now)
        gone = self.gone_reason(driver, attrs, now)
        return f"its driver {gone}" if gone else None

    def gone_reason(self, driver: str, attrs: dict[str, Any], now: float) -> str | None:
        """Why the driver `driver` is taken for gone, or None while it may live."""
        host, pid, _ = driver.rsplit(":", 2)
        if host == socket.gethostname() and not pid_alive(int(pid)):
            return f"{driver} is gone"
        silent = now - float(attrs.get(f"driver:{driver}", 0.0))
        return f"{driver} was silent for {silent:.0f} s" if silent > DRIVER_GRACE_SECONDS else None

    def unnamed_reason(self, trial, attrs: dict[str, Any], now: float) -> str | None:
        """A driver asks for a trial before it writes its id on it, so one killed in between leaves a RUNNING
        trial with no name. Every driver beats its heartbeat before it asks, so when each other driver of the
        study is gone, nobody runs the trial; failing that, a name still missing after the grace means the same."""
        others = [key.removeprefix("driver:") for key in attrs
                  if key.startswith("driver:") and key != f"driver:{self.id}"]
        if all(self.gone_reason(other, attrs, now) for other in others):
            return "its driver was gone before it recorded itself (no other driver of the study lives)"
        started = trial.datetime_start.timestamp() if trial.datetime_start else now
        return "no driver recorded it" if now - started > DRIVER_GRACE_SECONDS else None

    def recover_stale(self) -> None:
        # the trials before the heartbeats: a driver that asked for one of them had beaten before it asked
        running = self.trials.of(self.trials.states.RUNNING)
        attrs, now = self.study.user_attrs, time.time()
        for trial in running:
            reason = self.stale_reason(trial, attrs, now)
            if reason is not None:
                self.fail_and_retry(trial, f"trial left RUNNING: {reason}; failed and enqueued again")

    def fail_and_retry(self, trial, reason: str) -> None:
        """FAIL a trial nobody runs and enqueue its parameters; of drivers racing for it, one wins the tell."""
        from optuna.exceptions import UpdateFinishedTrialError

        try:
            self.store.set_user_attr(trial.number, "fail_reason", reason)
            self.study.tell(trial.number, state=self.trials.states.FAIL)
        except (UpdateFinishedTrialError, ValueError):
            return
        self.study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
        self.echo(f"trial {trial.number} failed   {reason}")
