"""The driver: asks the study for trials, runs them on Ray, tells the outcomes; several drivers may share a study
(heartbeats in the storage, trials of a driver that is gone failed and enqueued again)."""
from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from orchestrator.driver.run_errors import RunError
from orchestrator.driver.signals import RunInterrupted, StopSignals
from orchestrator.experiment.config import (
    ConfigError,
)
from pipelines.sweep_file import Sweep, absolute_paths_of, redacted
from pipelines.sweep_objective import shown
from pipelines.sweep_optuna import best_trial, distributions, quiet_optuna
from pipelines.sweep_tracking import tag_trial_run
from pipelines.sweep_trial import TrialJob, TrialOutcome, one_line, run_trial, trial_config
from pipelines.trial_store import TrialStore

DRIVER_GRACE_SECONDS = 120.0  # a driver silent this long (heartbeat) is taken for gone
HEARTBEAT_SECONDS = 15.0


@dataclass
class SweepResult:
    study_name: str
    storage_url: str
    complete: int
    pruned: int
    failed: int
    best_number: int | None
    best_value: float | None
    best_params: dict[str, Any]
    parent_run_id: str | None
    outputs: list[str] = field(default_factory=list)
    out_dir: str | None = None  # where `outputs` are kept (None: on object storage, kept as the parent run's artifacts)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, and another user's
        pass
    return True


class Driver:
    """One process running trials of a study; several may share it. Each records a heartbeat in the study
    and its id on the trials it runs, so a trial whose driver is gone is recognised and retried."""

    def __init__(self, sweep: Sweep, study, store: TrialStore, parent_run_id: str | None, parallel: int, echo):
        self.sweep, self.study, self.store, self.echo = sweep, study, store, echo
        self.parent_run_id = parent_run_id
        self.parallel = parallel
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.base_abs = absolute_paths_of(sweep.base)
        self.pending: dict[Any, Any] = {}  # ObjectRef → optuna Trial
        self.failures: list[str] = []
        self.last_beat = 0.0
        self.states = quiet_optuna().trial.TrialState

    # ------------------------------------------------------------------ bookkeeping in the storage
    def heartbeat(self, force: bool = False) -> None:
        now = time.time()
        if force or now - self.last_beat >= HEARTBEAT_SECONDS:
            self.study.set_user_attr(f"driver:{self.id}", now)
            self.last_beat = now

    def trials(self, *states):
        return self.study.get_trials(deepcopy=False, states=states or None)

    def counts(self) -> dict[str, int]:
        s = self.states
        by_state = {"complete": s.COMPLETE, "pruned": s.PRUNED, "failed": s.FAIL, "running": s.RUNNING,
                    "waiting": s.WAITING}
        trials = self.trials()
        return {name: sum(t.state == state for t in trials) for name, state in by_state.items()}

    def done(self) -> int:
        return len(self.trials(self.states.COMPLETE, self.states.PRUNED))

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
        running = self.trials(self.states.RUNNING)
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
            self.study.tell(trial.number, state=self.states.FAIL)
        except (UpdateFinishedTrialError, ValueError):
            return
        self.study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
        self.echo(f"trial {trial.number} failed   {reason}")

    # ------------------------------------------------------------------ launching and finishing trials
    def launch(self, remote) -> bool:
        """Start one trial if the study still needs one; False when it does not."""
        counts = self.counts()
        if counts["complete"] + counts["pruned"] + counts["running"] >= self.sweep.n_trials:
            return False
        trial = self.study.ask(distributions(self.sweep))
        if not self.claim(trial):
            return False
        trial.set_user_attr("driver", self.id)
        try:
            cfg = trial_config(self.sweep, self.base_abs, trial.params, trial.number)
        except ConfigError as e:
            self.tell(trial, TrialOutcome("failed", reason=str(e).removeprefix("config: ")))
            return True
        job = TrialJob(trial.number, cfg, self.sweep.study_name, self.sweep.storage_url,
                       self.sweep.config.pruner, self.sweep.config.objective, self.parent_run_id)
        self.pending[remote.remote(job)] = trial
        retry = trial.user_attrs.get("retry_of")
        self.echo(f"trial {trial.number} running  {format_params(trial.params)}"
                  + (f"  (retry of trial {retry})" if retry is not None else ""))
        return True

    def claim(self, trial) -> bool:
        """Two drivers may ask for the last trial at the same moment: the lower number keeps it, the other goes
        back to WAITING (its parameters kept), so no more than n_trials run."""
        s = self.states
        ahead = sum(t.number < trial.number for t in self.trials(s.COMPLETE, s.PRUNED, s.RUNNING, s.WAITING))
        if ahead < self.sweep.n_trials:
            return True
        self.store.put_back(trial.number)
        return False

    def finish(self, ref) -> None:
        import ray

        trial = self.pending.pop(ref)
        try:
            outcome = ray.get(ref)
        except Exception as e:  # the task itself died (worker lost, out of memory): the trial fails
            outcome = TrialOutcome("failed", reason=one_line(e))
        self.tell(trial, outcome)

    def tell(self, trial, outcome: TrialOutcome) -> None:
        from optuna.exceptions import UpdateFinishedTrialError

        attrs = {"client_rounds": outcome.client_rounds, "rounds": outcome.rounds,
                 "wall_seconds": round(outcome.wall_seconds, 2), "mlflow_run_id": outcome.mlflow_run_id}
        if outcome.state == "failed" or outcome.reason.startswith("diverged"):
            attrs["fail_reason"] = outcome.reason
        elif outcome.state == "pruned":
            attrs["pruned_reason"] = outcome.reason
        state = {"complete": self.states.COMPLETE, "pruned": self.states.PRUNED, "failed": self.states.FAIL}
        try:
            for key, value in attrs.items():
                trial.set_user_attr(key, value)
            self.study.tell(trial, outcome.value if outcome.state == "complete" else None,
                            state=state[outcome.state])
        except (UpdateFinishedTrialError, ValueError):
            self.echo(f"trial {trial.number} was already finished elsewhere (its driver was taken for gone)")
            return
        if outcome.state == "failed":
            self.failures.append(outcome.reason)
        tag_trial_run(self.sweep, outcome, trial.number)
        self.echo(self.progress_line(trial.number, outcome))
        self.check_failures()

    def progress_line(self, number: int, outcome: TrialOutcome) -> str:
        metric = self.sweep.config.objective.spec
        if outcome.state == "complete":
            what = f"complete {metric} = {shown(outcome.value, metric)}"
        else:
            what = f"{outcome.state:<8} {outcome.reason}"
        best = best_trial(self.study)
        best_text = f"best {shown(best.value, metric)} (trial {best.number})" if best else "best -"
        return (f"trial {number} {what}  [{outcome.rounds} rounds, {outcome.wall_seconds:.0f} s]  {best_text}  "
                f"{self.done()}/{self.sweep.n_trials} done")

    # ------------------------------------------------------------------ the loop
    def run(self, stop: StopSignals) -> None:
        """Trials until n_trials are complete or pruned. A stop signal ends it with RunInterrupted (what was kept,
        how to resume) and max_failures failed trials with RunError; either way the trials running are failed
        and enqueued again."""
        import ray

        remote = ray.remote(num_cpus=0, max_retries=0)(run_trial)
        self.heartbeat(force=True)
        self.recover_stale()
        try:
            while stop.signum is None:
                while len(self.pending) < self.parallel and stop.signum is None and self.launch(remote):
                    pass
                if not self.pending and self.done() >= self.sweep.n_trials:
                    return
                # a signal is seen between waits
                ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=2.0) if self.pending else ([], [])
                if not ready and not self.pending:
                    time.sleep(2.0)  # other drivers' trials are running: wait for them, or for one to fail
                for ref in ready:
                    self.finish(ref)
                self.heartbeat()
                self.recover_stale()
        except BaseException:
            self.abandon_pending()
            raise
        raise self.stopped(stop.signum)

    def check_failures(self) -> None:
        """Stop the sweep once max_failures of this driver's trials have failed (a trial config refused for every
        trial, a bug), instead of asking for trials that fail as fast as they start."""
        if len(self.failures) >= self.sweep.max_failures:
            raise RunError(f"sweep {self.sweep.study_name}: stopped after {len(self.failures)} failed trials "
                           f"(max_failures = {self.sweep.max_failures}), the last with {self.failures[-1]}; fix the "
                           "sweep and run the same command to resume (or raise --max-failures)")

    def stopped(self, signum: int) -> RunInterrupted:
        """SIGINT or SIGTERM: the trials running failed and enqueued again; what the study keeps, said in one line."""
        running = len(self.pending)
        self.abandon_pending()
        c = self.counts()
        requeued = f"; {running} running {'trial was' if running == 1 else 'trials were'} failed and enqueued again"
        return RunInterrupted(f"sweep {self.sweep.study_name} stopped: {c['complete']} complete and {c['pruned']} "
                              f"pruned trials kept in {redacted(self.sweep.storage_url)}{requeued if running else ''}; "
                              "run the same command to resume", signum)

    def abandon_pending(self) -> None:
        """Stopped (Ctrl-C, an error): what was running fails now and is enqueued again for the next driver."""
        import ray

        for ref, trial in list(self.pending.items()):
            try:
                ray.cancel(ref, force=True)
            except Exception:  # Ray may be going down with us; the trial is failed and enqueued all the same
                pass
            self.fail_and_retry(self.store.get(trial.number),
                                "the sweep driver stopped while the trial ran; failed and enqueued again")
        self.pending.clear()


def format_params(params: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
