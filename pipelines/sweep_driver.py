"""The driver: asks the study for trials, runs them on Ray, tells the outcomes; several drivers may share a study
(heartbeats in the storage, trials of a driver that is gone failed and enqueued again: pipelines/driver_liveness.py;
the outcomes told: pipelines/trial_outcomes.py)."""
from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from orchestrator.driver.signals import RunInterrupted, StopSignals
from orchestrator.experiment.config import (
    ConfigError,
)
from pipelines.driver_liveness import (  # noqa: F401  (re-exported)
    DRIVER_GRACE_SECONDS,
    HEARTBEAT_SECONDS,
    DriverLiveness,
    pid_alive,
)
from pipelines.study_trials import StudyTrials
from pipelines.sweep_file import Sweep, absolute_paths_of, redacted
from pipelines.sweep_optuna import distributions
from pipelines.sweep_trial import TrialJob, TrialOutcome, one_line, run_trial, trial_config
from pipelines.trial_outcomes import TrialOutcomes
from pipelines.trial_store import TrialStore


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


class Driver:
    """One process running trials of a study; several may share it. It asks for a trial while the study needs one,
    runs it as a Ray task and hands its outcome to be told (`outcomes`); its heartbeat in the study and the id it
    writes on its trials (`liveness`) let a trial whose driver is gone be recognised and retried."""

    def __init__(self, sweep: Sweep, study, store: TrialStore, parent_run_id: str | None, parallel: int, echo):
        self.sweep, self.study, self.store, self.echo = sweep, study, store, echo
        self.parent_run_id = parent_run_id
        self.parallel = parallel
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.base_abs = absolute_paths_of(sweep.base)
        self.pending: dict[Any, Any] = {}  # ObjectRef → optuna Trial
        self.trials = StudyTrials(study)
        self.liveness = DriverLiveness(study, store, self.trials, self.id, echo)
        self.outcomes = TrialOutcomes(sweep, study, self.trials, echo)

    def counts(self) -> dict[str, int]:
        return self.trials.counts()

    def heartbeat(self, force: bool = False) -> None:
        self.liveness.heartbeat(force)

    def recover_stale(self) -> None:
        self.liveness.recover_stale()

    # ------------------------------------------------------------------ launching and finishing trials
    def launch(self, remote) -> bool:
        """Start one trial if the study still needs one; False when it does not."""
        counts = self.trials.counts()
        if counts["complete"] + counts["pruned"] + counts["running"] >= self.sweep.n_trials:
            return False
        trial = self.study.ask(distributions(self.sweep))
        if not self.claim(trial):
            return False
        trial.set_user_attr("driver", self.id)
        try:
            cfg = trial_config(self.sweep, self.base_abs, trial.params, trial.number)
        except ConfigError as e:
            self.outcomes.tell(trial, TrialOutcome("failed", reason=str(e).removeprefix("config: ")))
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
        s = self.trials.states
        ahead = sum(t.number < trial.number for t in self.trials.of(s.COMPLETE, s.PRUNED, s.RUNNING, s.WAITING))
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
        self.outcomes.tell(trial, outcome)

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
                if not self.pending and self.trials.done() >= self.sweep.n_trials:
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

    def stopped(self, signum: int) -> RunInterrupted:
        """SIGINT or SIGTERM: the trials running failed and enqueued again; what the study keeps, said in one line."""
        running = len(self.pending)
        self.abandon_pending()
        c = self.trials.counts()
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
            self.liveness.fail_and_retry(self.store.get(trial.number),
                                         "the sweep driver stopped while the trial ran; failed and enqueued again")
        self.pending.clear()


def format_params(params: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
