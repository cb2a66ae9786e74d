"""checkpoint.every: auto (the default) checkpoints by the time the rounds took, not by their number: a checkpoint
once `auto_seconds` have passed since the previous one, and after the last round; an integer keeps its rounds."""
from __future__ import annotations

import pytest

from orchestrator.driver.run import run_experiment
from orchestrator.experiment.config import ConfigError, load_config
from orchestrator.io.checkpoint import checkpoint_rounds

ROUNDS = 4


def checkpoints_of(tmp_path, *overrides: str) -> list[int]:
    cfg = load_config("configs/default.yaml", [
        "data.num_clients=6", "train.clients_per_round=3", f"train.rounds={ROUNDS}", "tracking.enabled=false",
        "resources.rounds_per_call=1", "resources.clients_on=coordinator", f"checkpoint.dir={tmp_path / 'runs'}",
        f"data.partitions_dir={tmp_path / 'p'}", *overrides])
    return checkpoint_rounds(run_experiment(cfg, progress=False).run_dir)


def test_the_default_writes_only_the_last_checkpoint_of_a_run_shorter_than_auto_seconds(tmp_path):
    assert load_config("configs/default.yaml", []).checkpoint.every == "auto"
    assert checkpoints_of(tmp_path, "checkpoint.auto_seconds=3600") == [ROUNDS]


def test_auto_checkpoints_after_each_call_once_auto_seconds_have_passed(tmp_path):
    assert checkpoints_of(tmp_path, "checkpoint.auto_seconds=1e-9") == list(range(1, ROUNDS + 1))


def test_an_integer_every_keeps_checkpointing_by_rounds(tmp_path):
    assert checkpoints_of(tmp_path, "checkpoint.every=3") == [3, ROUNDS]


@pytest.mark.parametrize("value", ["sometimes", "-1"])
def test_every_is_a_round_count_or_auto(value):
    with pytest.raises(ConfigError, match="checkpoint.every"):
        load_config("configs/default.yaml", [f"checkpoint.every={value}"])


def test_small_rounds_come_eight_to_the_first_call_and_others_one(tmp_path):
    """A checkpoint after every call (auto_seconds ≈ 0) shows where calls end: where clients_on: auto puts these
    small rounds in the coordinator, the first two calls (asked for together) take FIRST_CALL_SMALL_ROUNDS rounds
    each; with clients_on=coordinator asked for (rounds of any size), one each until a round's time is known."""
    from orchestrator.driver.round_loop import FIRST_CALL_SMALL_ROUNDS

    rounds = FIRST_CALL_SMALL_ROUNDS + 4
    small = checkpoints_of(tmp_path / "auto", "checkpoint.auto_seconds=1e-9", "resources.rounds_per_call=auto",
                           "resources.clients_on=auto", f"train.rounds={rounds}")
    assert small == [FIRST_CALL_SMALL_ROUNDS, rounds]
    asked = checkpoints_of(tmp_path / "asked", "checkpoint.auto_seconds=1e-9", "resources.rounds_per_call=auto",
                           f"train.rounds={rounds}")
    assert asked[:2] == [1, 2] and asked[-1] == rounds
