"""Nothing silently wrong (issue #36): a failed round never reaches a checkpoint and a resume continues from the
last round that completed; a method's own bug stops the run naming the method, hook, client and round, while a
lost actor is still retried; and a `mooring run` leaves none of its Ray instance's processes behind."""
from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import checkpoint as ckpt
from orchestrator.config import load_config
from orchestrator.run import run_experiment
from orchestrator.run_errors import RunError

FAULTY = "tests.faulty_methods"


def deterministic(history):
    return [{k: v for k, v in m.items() if "seconds" not in k} for m in history]


def faulty_config(workdir, method: str, block: str, flag: Path, fault_round: int, *overrides: str):
    return load_config("configs/default.yaml", workdir + [
        "data.num_clients=4", "train.local_epochs=1", f"algorithm.name={FAULTY}:{method}",
        f"algorithm.{block}.flag={flag}", f"algorithm.{block}.round={fault_round}", *overrides])


# ------------------------------------------------------------------------------- a failed round
@pytest.mark.ray
def test_a_failed_round_is_never_checkpointed_and_the_resume_gives_the_uninterrupted_history(ray_session, workdir,
                                                                                              tmp_path):
    """round_metrics raises in round 3 with a checkpoint every round and calls queued behind it: the rounds after
    it never run, no checkpoint after round 2 exists, and the resume (the bug gone) gives rounds 1..6 as a run
    that never failed does."""
    flag = tmp_path / "fault"
    flag.touch()
    cfg = faulty_config(workdir, "FailingRoundMetrics", "failing_round_metrics", flag, 3, "train.rounds=6",
                        "checkpoint.every=1", "resources.num_actors=1")
    run_dir = str(tmp_path / "runs" / "failed")
    with pytest.raises(RunError) as failed:
        run_experiment(cfg, progress=False, run_dir=run_dir)
    assert ckpt.checkpoint_rounds(run_dir) == [1, 2]
    assert f"the last checkpoint is {run_dir}/checkpoints/round-000002;" in str(failed.value)
    flag.unlink()
    resumed = run_experiment(cfg, progress=False, resume_dir=run_dir)
    assert [m["round"] for m in resumed.history] == [1, 2, 3, 4, 5, 6]
    uninterrupted = run_experiment(cfg, progress=False)
    assert deterministic(resumed.history) == deterministic(uninterrupted.history)
