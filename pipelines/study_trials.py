"""A study's trials as its storage holds them, every driver's: listed and counted by state (the counts that tell a
sweep's drivers whether the study still needs a trial)."""
from __future__ import annotations

from pipelines.sweep_optuna import quiet_optuna


class StudyTrials:
    """The trials of a study that several drivers share, by state."""

    def __init__(self, study):
        self.study = study
        self.states = quiet_optuna().trial.TrialState

    def of(self, *states):
        """The trials in `states` (none: every trial)."""
        return self.study.get_trials(deepcopy=False, states=states or None)

    def counts(self) -> dict[str, int]:
        s = self.states
        by_state = {"complete": s.COMPLETE, "pruned": s.PRUNED, "failed": s.FAIL, "running": s.RUNNING,
                    "waiting": s.WAITING}
        trials = self.of()
        return {name: sum(t.state == state for t in trials) for name, state in by_state.items()}

    def done(self) -> int:
        return len(self.of(self.states.COMPLETE, self.states.PRUNED))
