"""A driver's finished trials told to the study (state, value, why it failed or was pruned), tagged on their MLflow
runs and echoed as a progress line; and the sweep stopped once max_failures of them have failed."""
from __future__ import annotations

from orchestrator.driver.run_errors import RunError
from pipelines.study_trials import StudyTrials
from pipelines.sweep_file import Sweep
from pipelines.sweep_objective import shown
from pipelines.sweep_optuna import best_trial
from pipelines.sweep_tracking import tag_trial_run
from pipelines.sweep_trial import TrialOutcome


class TrialOutcomes:
    """The outcomes of one driver's trials, told as they come; the failures among them counted."""

    def __init__(self, sweep: Sweep, study, trials: StudyTrials, echo):
        self.sweep, self.study, self.trials, self.echo = sweep, study, trials, echo
        self.failures: list[str] = []

    def tell(self, trial, outcome: TrialOutcome) -> None:
        from optuna.exceptions import UpdateFinishedTrialError

        attrs = {"client_rounds": outcome.client_rounds, "rounds": outcome.rounds,
                 "wall_seconds": round(outcome.wall_seconds, 2), "mlflow_run_id": outcome.mlflow_run_id}
        if outcome.state == "failed" or outcome.reason.startswith("diverged"):
            attrs["fail_reason"] = outcome.reason
        elif outcome.state == "pruned":
            attrs["pruned_reason"] = outcome.reason
        states = self.trials.states
        state = {"complete": states.COMPLETE, "pruned": states.PRUNED, "failed": states.FAIL}
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
                f"{self.trials.done()}/{self.sweep.n_trials} done")

    def check_failures(self) -> None:
        """Stop the sweep once max_failures of this driver's trials have failed (a trial config refused for every
        trial, a bug), instead of asking for trials that fail as fast as they start."""
        if len(self.failures) >= self.sweep.max_failures:
            raise RunError(f"sweep {self.sweep.study_name}: stopped after {len(self.failures)} failed trials "
                           f"(max_failures = {self.sweep.max_failures}), the last with {self.failures[-1]}; fix the "
                           "sweep and run the same command to resume (or raise --max-failures)")
