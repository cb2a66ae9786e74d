"""A run's phases are timed (what `mooring run --profile` prints), and `mooring run` ends without leaving any
process of the Ray instance it started."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.driver.run import run_experiment
from orchestrator.experiment.config import load_config
from orchestrator.phases import Phases, profile_table

pytestmark = pytest.mark.ray
FAST = ["train.rounds=3", "train.local_epochs=1", "data.num_clients=6", "checkpoint.every=2", "resources.num_actors=2",
        "resources.clients_on=actors"]


def test_phases_count_and_sum_what_they_time():
    phases = Phases()
    for _ in range(3):
        with phases("work"):
            pass
    phases.add("work", 2.0)
    phases.merge({"other": [0.5, 1.5]}, prefix="actor ")
    seconds = phases.as_dict()
    assert len(seconds["work"]) == 4 and sum(seconds["work"]) >= 2.0 and seconds["actor other"] == [0.5, 1.5]
    table = profile_table({"actor other": [0.5, 1.5]})
    assert table.splitlines()[1].split()[-3:] == ["2", "1000.00", "2.000"]  # count, median ms, total s


def test_a_run_times_its_start_up_rounds_and_end(ray_session, workdir):
    result = run_experiment(load_config("configs/default.yaml", FAST + workdir), progress=False)
    phases = result.phases
    for name in ("start: Ray", "start: data (in the background)", "start: client actors ready and loaded",
                 "end: artifacts"):
        assert len(phases[name]) == 1
    for name in ("driver: wait for the round", "round: clients' updates", "round: aggregate", "round: evaluate"):
        assert len(phases[name]) == 3
    # each round, each actor that trains reports its own work and the call around it (partial sums are on by
    # default, hence update_summed; these rounds are one client group, trained by one of the two actors)
    assert len(phases["update_summed: actor host work"]) == len(phases["update_summed: actor call beyond it"]) >= 3
    assert len(phases["driver: wait for the checkpoint"]) == 2  # after rounds 2 and 3 (the last)
    # each round's seconds on the coordinator's clock hold that round's phases there
    assert len(result.coordinator_round_seconds) == len(result.round_seconds) == 3
    for i, own in enumerate(result.coordinator_round_seconds):
        assert own >= sum(phases[name][i] for name in ("round: clients' updates", "round: aggregate", "round: evaluate"))
    assert not any(key.startswith(("start:", "round:", "update:", "driver:")) for m in result.history for key in m)


def test_mooring_run_exits_with_its_result_and_leaves_no_ray_process(mooring_run_on_its_own_ray):
    """On client actors (a run that needs Ray: it starts a local instance and ends it), as a new user runs it
    (tests/own_ray_run.py: the run tests/test_failures.py reads too)."""
    done = mooring_run_on_its_own_ray
    assert done.returncode == 0, done.stderr
    assert "3 rounds in" in done.stdout and done.out_json.exists()
    assert (done.home / ".ray" / "auth_token").exists()  # Ray's token authentication, on and silent
    assert "Token authentication is enabled" not in done.stderr
    # within 60 s of its exit (the kernel kills Ray's processes with the driver; workers follow their raylet)
    assert done.environment_left == []


def test_mooring_run_starts_ray_before_importing_torch():
    """`mooring run` starts Ray while a thread validates the config and prepares the data (importing torch, seconds
    of CPU): the modules its main thread imports first import neither torch nor MLflow, and a server without
    privacy noise imports no privacy accountant (autodp, SciPy)."""
    code = ("import sys, orchestrator.cli, orchestrator.commands.run, orchestrator.driver.run; "
            "heavy = [m for m in ('torch', 'mlflow', 'tasks.algorithms') if m in sys.modules]; "
            "import orchestrator.server.federation; "
            "print(heavy + [m for m in ('autodp', 'scipy') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_the_warm_up_trains_and_leaves_the_random_states_as_they_were(tmp_path):
    """The warm-ups (orchestrator/clients/warm_up.py: the host's, and the coordinator's throwaway round) draw from
    torch's global generator (their throwaway models) and train; torch's, NumPy's and Python's global states are as
    before them, and they write nothing."""
    import random

    import numpy as np
    import torch

    from orchestrator.clients.warm_up import warm_up
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.coordinator import warm_up_round

    cfg = load_config("configs/default.yaml", ["data.num_clients=4", f"data.partitions_dir={tmp_path}"])
    data = prepare_data(cfg)
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    files = sorted(tmp_path.rglob("*"))
    for warming in (lambda: warm_up(cfg, data, [0, 1, 2]), lambda: warm_up_round(cfg, data)):
        before = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
        assert warming()  # it ran, and did not fail
        after = torch.get_rng_state(), np.random.get_state()[1], random.getstate()
        assert torch.equal(before[0], after[0]) and np.array_equal(before[1], after[1]) and before[2] == after[2]
        assert sorted(tmp_path.rglob("*")) == files  # it wrote nothing
    off = load_config("configs/default.yaml", ["resources.warm_up=false"])
    assert not warm_up(off, data, [0, 1]) and not warm_up_round(off, data)


def test_the_warm_up_changes_no_history(ray_session, workdir):
    """A run with the warm-up and one without it: the same history, bitwise. SCAFFOLD's clients keep control
    variates between rounds, which a warm-up on the run's own clients (rather than on copies) would move."""
    scaffold = ["algorithm.name=scaffold", "train.optimizer.name=sgd", "train.optimizer.momentum=0",
                "resources.clients_on=coordinator", "train.rounds=3", "data.num_clients=6", "checkpoint.every=2"]
    warm, cold = (run_experiment(load_config("configs/default.yaml", scaffold + workdir + [f"resources.warm_up={on}"]),
                                 progress=False) for on in ("true", "false"))
    assert warm.history == cold.history and len(warm.history) == 3
    assert warm.history[-1]["train_loss"] > 0


def test_a_coordinator_launched_on_a_wrong_guess_is_replaced(ray_session, workdir):
    """Under resources.clients_on: auto without GPUs the coordinator is launched before the data, to train the
    clients itself; where the data then says the rounds are big (6 clients × 50 steps), it is replaced by one that
    trains them on client actors, and the run goes on."""
    import json

    big_rounds = ["train.rounds=2", "train.local_steps=50", "data.num_clients=6", "train.clients_per_round=6",
                  "resources.num_actors=2", "resources.clients_on=auto", "checkpoint.every=2"]
    result = run_experiment(load_config("configs/default.yaml", big_rounds + workdir), progress=False)
    assert len(result.phases["start: coordinator relaunched (guessed wrong)"]) == 1
    hosts = json.loads((Path(result.run_dir) / "actors.json").read_text())
    assert len(hosts) == 2 and not any(host.get("in_coordinator") for host in hosts)
    assert len(result.history) == 2


def test_mooring_sweep_ends_the_ray_instance_it_started_with_it(tmp_path):
    """A sweep given no cluster starts a local Ray instance, and its process ends it at once when done
    (orchestrator/cli.py, `exit_without_ray_shutdown`) rather than shutting it down in order, which left the
    instance's agents to notice their raylet's end by themselves: 5 s after the sweep exits, no process of its
    instance is left (its Ray processes carry its own TMPDIR)."""
    import os
    import shutil
    import tempfile
    import time

    import yaml

    from tests.own_ray_run import ray_processes_of

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "base": str(Path("configs/default.yaml").absolute()), "n_trials": 1, "sampler": {"name": "random", "seed": 0},
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}",
        "overrides": {"data.num_clients": 4, "train.clients_per_round": 2, "train.rounds": 1, "train.local_epochs": 1,
                      "checkpoint.dir": str(tmp_path / "runs"), "data.partitions_dir": str(tmp_path / "parts"),
                      "tracking.uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
        "params": {"train.optimizer.lr": {"type": "float", "low": 0.05, "high": 0.5}}}))
    ray_tmp = tempfile.mkdtemp(prefix="mx-")  # short: Ray's socket paths under it must fit in 107 bytes
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "TMPDIR": ray_tmp}
    done = subprocess.run([str(Path(sys.executable).parent / "mooring"), "sweep", str(sweep)], capture_output=True,
                          text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "best trial 0 on the test set" in done.stdout
    deadline = time.monotonic() + 5
    while ray_processes_of(ray_tmp) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray_processes_of(ray_tmp) == []
    shutil.rmtree(ray_tmp, ignore_errors=True)
