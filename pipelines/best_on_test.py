"""The best trial's test score, measured once. No trial reads the test sets (pipelines/sweep_objective.py): once
the trials are done, the best trial's config is run again (the same seed, the same clients' training samples,
its validation split still held out, one client actor as a trial has) evaluated on the test sets, and the score
is recorded in the study, beside the trial's validation score. A sweep run again, or `--best`, reports the
recorded number; the test sets are read again only when another trial has become the best. Where several drivers
share a study, the one that finishes its last trial measures it; the others leave it to that one."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from orchestrator.experiment.config import with_overrides
from orchestrator.io import storage
from pipelines.sweep_file import Sweep, absolute_paths_of, best_config
from pipelines.sweep_objective import final_score, shown
from pipelines.sweep_optuna import best_trial

TEST_ATTR = "best_on_test"  # the study's user attribute holding a BestOnTest
CLAIM_ATTR = "best_on_test_claim"  # which driver measures it
CLAIM_SETTLE_SECONDS = 1.0  # long enough for a claim written at the same moment by another driver to land


@dataclass(frozen=True)
class BestOnTest:
    """The best trial's validation score and the same config's test score (None, with the reason, if it has none)."""

    trial: int
    validation: float
    test: float | None
    reason: str = ""
    mlflow_run_id: str | None = None

    def line(self, metric: str) -> str:
        test = shown(self.test, metric) if self.test is not None else f"none ({self.reason})"
        return (f"best trial {self.trial} on the test set: {metric} = {test} "
                f"(validation {shown(self.validation, metric)}; measured once, the only run that reads the test sets)")


def recorded(study) -> BestOnTest | None:
    """The test score recorded for the study's current best trial, if any."""
    best, record = best_trial(study), study.user_attrs.get(TEST_ATTR)
    if best is None or not record or record["trial"] != best.number:
        return None
    return BestOnTest(**record)


def trials_still_running(study) -> bool:
    """Whether some driver sharing the study still runs or is about to run a trial (a gone driver's are recovered
    by the next driver that starts: pipelines/sweep_driver.py)."""
    from optuna.trial import TrialState

    return bool(study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)))


def claimed_by_this_driver(study, trial_number: int) -> bool:
    """Two drivers that finish at the same moment both see no trial running: each writes its claim, waits for the
    other's write to land, and only the driver whose claim stands (the last written) measures."""
    import time
    import uuid

    mine = {"trial": trial_number, "by": uuid.uuid4().hex}
    study.set_user_attr(CLAIM_ATTR, mine)
    time.sleep(CLAIM_SETTLE_SECONDS)
    return study.user_attrs.get(CLAIM_ATTR) == mine


def best_on_test(sweep: Sweep, study, parent_run_id: str | None) -> BestOnTest | None:
    """The best trial's test score: recorded, or measured now (a run) and recorded; None without a complete trial."""
    from orchestrator.driver.run import run_experiment

    best = best_trial(study)
    if best is None or trials_still_running(study):
        return None  # another driver still runs a trial: the one that finishes the study's last trial measures it
    if (done := recorded(study)) is not None:
        return done
    if not claimed_by_this_driver(study, best.number):
        return None
    cfg = with_overrides(absolute_paths_of(best_config(sweep, best)), {
        "resources.num_actors": 1, "eval.split": "test",
        "checkpoint.dir": storage.join(sweep.sweep_dir, f"best-on-test-{best.number:04d}")})
    result = run_experiment(cfg, progress=False, parent_run_id=parent_run_id)
    score = final_score(sweep.config.objective, result.history, cfg.participation.target_accuracy, split="test")
    out = BestOnTest(best.number, float(best.value), score.value, score.reason, result.mlflow_run_id)
    study.set_user_attr(TEST_ATTR, asdict(out))
    return out


def measure_best_on_test(sweep: Sweep, study, tracker) -> BestOnTest | None:
    """best_on_test, its run nested under the sweep's parent run, and both scores logged on that run."""
    tested = best_on_test(sweep, study, tracker.run_id)
    if tested is not None and tested.test is not None:
        tracker.log_summary({"best_trial_validation": tested.validation, "best_trial_test": tested.test},
                            step=len(study.trials))
    return tested
