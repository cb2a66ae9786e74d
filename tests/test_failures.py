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


# --------------------------------------------------------------------------------- Ray's processes
def session_dir(cmdlines: list[str]) -> str:
    """The Ray session directory the processes' command lines name (/tmp/ray/session_...)."""
    import re

    return next(m.group(0) for line in cmdlines if (m := re.search(r"/\S*/session_[^/\s]+", line)))


def test_a_run_leaves_none_of_its_ray_instance_s_processes_behind(tmp_path):
    """The processes of the local instance `mooring run` started (its dashboard and runtime-env agents included,
    which Ray leaves to notice their raylet's end for about a minute) end with it, seen by their command lines
    naming the instance's session directory."""
    import os
    import subprocess
    import sys
    import time

    import psutil

    sets = [f"checkpoint.dir={tmp_path / 'runs'}", f"data.partitions_dir={tmp_path / 'p'}", "tracking.enabled=false",
            "train.rounds=20", "data.num_clients=4", "resources.num_actors=1"]
    mooring = Path(sys.executable).parent / "mooring"
    run = subprocess.Popen([str(mooring), "run", "configs/default.yaml", "--quiet", *[f"--set={s}" for s in sets]],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    seen: dict[int, psutil.Process] = {}
    cmdlines = []
    while run.poll() is None:  # every process the run starts, as it starts them
        try:
            for child in psutil.Process(run.pid).children(recursive=True):
                if child.pid not in seen:
                    seen[child.pid] = child
                    cmdlines.append(" ".join(child.cmdline()))
        except psutil.Error:
            pass
        time.sleep(0.05)
    assert run.wait() == 0, run.stderr.read()[-2000:]
    assert any("dashboard/agent.py" in line for line in cmdlines)  # the agents were seen running
    session = session_dir(cmdlines)

    def described(process: psutil.Process) -> str | None:
        try:
            return None if process.status() == psutil.STATUS_ZOMBIE else " ".join(process.cmdline())[:120]
        except psutil.Error:  # ended meanwhile
            return None

    def of_the_session() -> list[str]:
        named = [p for p in psutil.process_iter(["cmdline"]) if session in " ".join(p.info["cmdline"] or [])]
        return sorted({d for p in [*seen.values(), *named] if (d := described(p)) is not None})

    deadline = time.monotonic() + 5
    while of_the_session() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert of_the_session() == []
