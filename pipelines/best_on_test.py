"""The best trial's test score, measured once. No trial reads the test sets (pipelines/sweep_objective.py): once
the trials are done, the best trial's config is run again (the same seed, the same clients' training samples,
its validation split still held out, one client actor as a trial has) evaluated on the test sets, and the score
is recorded in the study, beside the trial's validation score. A sweep run again, or `--best`, reports the
recorded number; the test sets are read again only when another trial has become the best. Where several drivers
share a study, the one that finishes its last trial measures it; where two finish together, the one whose claim is
inserted first (a study named after the trial, which the storage lets only one driver create) measures it."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from orchestrator.experiment.config import with_overrides
from orchestrator.io import storage
from pipelines.sweep_file import Sweep, absolute_paths_of, best_config
from pipelines.sweep_objective import final_score, shown
from pipelines.sweep_optuna import best_trial

TEST_ATTR = "best_on_test"  # the study's user attribute holding a BestOnTest
CLAIM_OWNER_ATTR = "claimed_by"  # the claim study's user attribute: {"host", "pid"} of the measuring driver


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


def claim_name(study, trial_number: int) -> str:
    return f"{study.study_name}:best-on-test:{trial_number}"


def this_driver() -> dict:
    import os
    import socket

    return {"host": socket.gethostname(), "pid": os.getpid()}


def owner_is_gone(owner: dict) -> bool:
    """A claim left by a driver killed on this host (its process is gone); a claim from another host stands."""
    import os

    if owner.get("host") != this_driver()["host"]:
        return False
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, KeyError, TypeError, ValueError):
        return False
    return False


def claimed_by_this_driver(storage, study, trial_number: int) -> bool:
    """Whether this driver measures the trial: creating a study of the claim's name is one insert under a unique
    name, which exactly one of several drivers finishing together wins. A claim whose driver is gone (killed on
    this host while measuring) is taken over."""
    import optuna

    name = claim_name(study, trial_number)
    for _ in range(2):
        try:
            claim_id = storage.create_new_study(directions=[optuna.study.StudyDirection.MINIMIZE], study_name=name)
        except optuna.exceptions.DuplicatedStudyError:
            owner = claim_owner(storage, name)
            if owner is None or not owner_is_gone(owner):
                return False
            release_claim(storage, name)
            continue
        storage.set_study_user_attr(claim_id, CLAIM_OWNER_ATTR, this_driver())
        return True
    return False


def claim_owner(storage, name: str) -> dict | None:
    import optuna

    try:
        return storage.get_study_user_attrs(storage.get_study_id_from_name(name)).get(CLAIM_OWNER_ATTR)
    except KeyError:  # released between the failed insert and this read
        return None
    except optuna.exceptions.OptunaError:
        return None


def release_claim(storage, name: str) -> None:
    try:
        storage.delete_study(storage.get_study_id_from_name(name))
    except KeyError:  # another driver released it first
        pass


def best_on_test(sweep: Sweep, storage, study, parent_run_id: str | None) -> BestOnTest | None:
    """The best trial's test score: recorded, or measured now (a run) and recorded; None without a complete trial
    (or when another driver measures it). `storage` is the study's Optuna storage, where the claim is made."""
    best = best_trial(study)
    if best is None or trials_still_running(study):
        return None  # another driver still runs a trial: the one that finishes the study's last trial measures it
    if (done := recorded(study)) is not None:
        return done
    if not claimed_by_this_driver(storage, study, best.number):
        return None
    try:
        return measured_on_test(sweep, study, best, parent_run_id)
    except BaseException:  # the run failed or the driver was stopped: the next driver may measure it
        release_claim(storage, claim_name(study, best.number))
        raise


def measured_on_test(sweep: Sweep, study, best, parent_run_id: str | None) -> BestOnTest:
    from orchestrator.driver.run import run_experiment

    cfg = with_overrides(absolute_paths_of(best_config(sweep, best)), {
        "resources.num_actors": 1, "eval.split": "test",
        "checkpoint.dir": storage.join(sweep.sweep_dir, f"best-on-test-{best.number:04d}")})
    result = run_experiment(cfg, progress=False, parent_run_id=parent_run_id)
    score = final_score(sweep.config.objective, result.history, cfg.participation.target_accuracy, split="test")
    out = BestOnTest(best.number, float(best.value), score.value, score.reason, result.mlflow_run_id)
    study.set_user_attr(TEST_ATTR, asdict(out))
    return out


def measure_best_on_test(sweep: Sweep, storage, study, tracker) -> BestOnTest | None:
    """best_on_test, its run nested under the sweep's parent run, and both scores logged on that run."""
    tested = best_on_test(sweep, storage, study, tracker.run_id)
    if tested is not None and tested.test is not None:
        tracker.log_summary({"best_trial_validation": tested.validation, "best_trial_test": tested.test},
                            step=len(study.trials))
    return tested
