"""A sweep's objective direction and the time-to-target objective (pipelines/sweep_objective.py): the direction
reaches Optuna's study and its pruner, hand-made histories score as docs/participation.md says (a trial that never
reaches the target is pruned), bad objectives are one line, and one real trial on the simulated clock is scored."""
from __future__ import annotations

import math

import pytest
import yaml

from tests.test_sweep import DEFAULT, mooring, write_sweep

TARGET = {"participation.target_accuracy": 0.5}


def time_to_target_sweep(tmp_path, name: str = "ttt", **fields):
    from pipelines.sweep_file import load_sweep

    fields = {"algorithm": "fedprox", "objective": {"metric": "time_to_target", "direction": "minimize"},
              "pruner": {"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0}, **fields}
    overrides = {**TARGET, "tracking.enabled": False, **fields.pop("overrides", {})}
    return load_sweep(write_sweep(tmp_path, "sqlite:///unused.db", name, overrides=overrides, **fields))


def test_the_direction_reaches_the_study_and_its_pruner_prunes_the_slower_trial(tmp_path):
    import optuna

    from orchestrator.experiment.config import ConfigError
    from pipelines.sweep_optuna import build_pruner, open_storage, open_study

    sweep = time_to_target_sweep(tmp_path)
    storage = open_storage(sweep.storage_url)
    study, created = open_study(sweep, storage)
    assert created and study.direction == optuna.study.StudyDirection.MINIMIZE
    first = study.ask()
    first.report(10.0, step=1)
    study.tell(first, 10.0)
    # as a trial's Ray task loads it (pipelines/sweep_trial.py): the direction comes from the storage
    loaded = optuna.load_study(study_name=sweep.study_name, storage=storage, pruner=build_pruner(sweep.config.pruner))
    slower, faster = loaded.ask(), loaded.ask()
    slower.report(20.0, step=1)
    faster.report(5.0, step=1)
    assert slower.should_prune() and not faster.should_prune()

    maximising = time_to_target_sweep(tmp_path, objective={"metric": "accuracy"})
    with pytest.raises(ConfigError, match="that study's direction is minimize; this sweep's objective.direction "
                                          "is maximize"):
        open_study(maximising, storage)


# a trial's history: evaluated on its validation split (val_accuracy); the test accuracy is not there to read
CLOCK = [{"round": 1, "val_accuracy": 0.4, "simulated_seconds": 3.0},
         {"round": 2, "val_accuracy": 0.72, "simulated_seconds": 7.5},
         {"round": 3, "val_accuracy": float("nan"), "simulated_seconds": 9.0},
         {"round": 4, "val_accuracy": 0.9, "simulated_seconds": 11.0}]


@pytest.mark.parametrize("target, per_round, state, value, reason", [
    (0.7, [3.0, 7.5, 7.5, 7.5], "complete", 7.5, ""),
    (0.9, [3.0, 7.5, 9.0, 11.0], "complete", 11.0, ""),
    (0.95, [3.0, 7.5, 9.0, 11.0], "pruned", None, "never reached val_accuracy 0.95 in 11 simulated s (best 0.9000)"),
])
def test_time_to_target_scores_the_first_round_at_the_target_and_prunes_a_trial_that_never_gets_there(
        target, per_round, state, value, reason):
    from pipelines.sweep_config import ObjectiveConfig
    from pipelines.sweep_objective import Score, final_score, round_value

    objective = ObjectiveConfig(metric="time_to_target", direction="minimize")
    assert [round_value(objective, CLOCK[:t], target) for t in range(1, 5)] == per_round
    assert final_score(objective, CLOCK, target) == Score(state, value, reason)
    on_test = [{k.removeprefix("val_"): v for k, v in m.items()} for m in CLOCK]  # the best trial's test run
    assert final_score(objective, on_test, target, split="test").value == value
    assert final_score(objective, on_test, target).state != "complete"  # a trial never scores a test accuracy


def test_other_objectives_score_as_before_and_a_run_without_a_clock_fails():
    from pipelines.sweep_config import ObjectiveConfig
    from pipelines.sweep_objective import final_score, round_value

    loss = ObjectiveConfig(metric="train_loss", aggregate="last5", direction="minimize")
    history = [{"round": 1, "train_loss": 2.0}, {"round": 2, "train_loss": 1.0}]
    assert round_value(loss, history, None) == 1.0 and final_score(loss, history, None).value == 1.5
    assert final_score(ObjectiveConfig(), history, None).reason.startswith("objective metric 'val_accuracy' is not in")
    no_clock = final_score(ObjectiveConfig(metric="time_to_target", direction="minimize"), history, 0.5)
    assert (no_clock.state, no_clock.reason) == ("failed", "time_to_target: the run logged no simulated clock")


@pytest.mark.parametrize("objective, overrides, message", [
    ({"metric": "time_to_target"}, TARGET, "objective: time_to_target is simulated seconds, to be minimised: "
                                           "set direction: minimize"),
    ({"metric": "time_to_target", "direction": "minimize"}, {},
     "objective.metric = time_to_target needs participation.target_accuracy in the base experiment"),
    ({"metric": "time_to_target", "direction": "minimize", "aggregate": "final"}, TARGET,
     "time_to_target is one figure per run: remove aggregate"),
    ({"metric": "time_to_target", "direction": "minimize", "max_epsilon": 8}, TARGET,
     "time_to_target runs the participation block, which a privacy block (hence max_epsilon) cannot go with"),
    ({"metric": "train_loss", "direction": "minimize", "aggregate": "best"}, {},
     "aggregate best takes the highest rounds; to minimise use final or last5"),
    ({"direction": "down"}, {}, "objective.direction = 'down': Input should be 'maximize' or 'minimize'"),
])
def test_bad_objectives_fail_in_one_line_with_exit_2(tmp_path, objective, overrides, message):
    body = {"base": str(DEFAULT), "algorithm": "fedprox", "overrides": {"checkpoint.dir": str(tmp_path), **overrides},
            "storage": f"sqlite:///{tmp_path / 'optuna.db'}", "objective": objective}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(body))
    rc, _, err = mooring("sweep", str(path), "--address", "127.0.0.1:1")  # refused before any Ray
    assert rc == 2 and message in err and err.count("\n") == 1 and err.startswith("error: ")


def test_a_real_trial_reports_its_clock_and_is_pruned_when_it_never_reaches_the_target(ray_session, tmp_path):
    import optuna

    from pipelines.sweep_file import absolute_paths_of
    from pipelines.sweep_optuna import open_storage, open_study
    from pipelines.sweep_trial import TrialJob, run_trial, trial_config

    sweep = time_to_target_sweep(tmp_path, overrides={"train.rounds": 2, "participation.target_accuracy": 1.0,
                                                      "participation.system.speed.sigma": 0.5})
    study, _ = open_study(sweep, open_storage(sweep.storage_url))
    trial = study.ask()
    cfg = trial_config(sweep, absolute_paths_of(sweep.base), {"algorithm.fedprox.mu": 0.01}, trial.number)
    outcome = run_trial(TrialJob(trial.number, cfg, sweep.study_name, sweep.storage_url, sweep.config.pruner,
                                 sweep.config.objective, None))
    clock = [m["simulated_seconds"] for m in outcome.history]
    assert outcome.state == "pruned" and outcome.value is None and len(clock) == 2 and 0 < clock[0] < clock[1]
    assert not any("accuracy" in m for m in outcome.history)  # the trial reads no test set, only its validation
    best = max(m["val_accuracy"] for m in outcome.history)
    assert outcome.reason == f"never reached val_accuracy 1 in {clock[-1]:.0f} simulated s (best {best:.4f})"
    stored = optuna.load_study(study_name=sweep.study_name, storage=sweep.storage_url).trials[0]
    assert stored.intermediate_values == {1: clock[0], 2: clock[1]} and not any(map(math.isnan, clock))
