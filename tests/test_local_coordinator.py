"""A run given no Ray cluster whose clients train in the coordinator runs it in the driver's process and starts no
Ray (orchestrator/driver/local_coordinator.py), tracked from a process of its own
(orchestrator/reporting/tracker_process.py): the same history as on Ray, MLflow's run read back, a method's bug
one line, and a stop and resume as on Ray."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.own_ray_run import ray_processes_of

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["data.num_clients=6", "train.clients_per_round=5", "train.rounds=4", "checkpoint.every=2",
         "train.group_steps=4"]


def started(*args: str, env_extra: dict | None = None) -> subprocess.Popen:
    """`mooring run ARGS` started, as a user starts it (no RAY_ADDRESS); `finished` waits for it."""
    env = {**os.environ, **(env_extra or {})}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def finished(proc: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def mooring_run(*args: str, env_extra: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return finished(started(*args, env_extra=env_extra), timeout)


def made_store(made: Path, directory: Path) -> str:
    """A copy of the session's MLflow store whose tables are made (tests/conftest.py), in `directory`: its URI."""
    import shutil

    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(made, directory / "mlflow.db")
    return f"sqlite:///{directory / 'mlflow.db'}"


def metrics_of(run_dir: Path) -> list[dict]:
    timing = ("seconds", "time")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not any(t in k for t in timing)} for row in rows]


def only_run(runs: Path) -> Path:
    [run_dir] = list(runs.iterdir())
    return run_dir


@pytest.mark.ray
def test_without_ray_the_history_is_the_coordinator_actors(ray_session, tmp_path, mlflow_store_made):
    """The same config in the coordinator actor (on the test session's Ray) and in the driver, without Ray: the
    histories and final models are bitwise equal; the local run started no Ray process and its MLflow run holds
    its metrics, params and artifacts, FINISHED. (The two runs go at once, each with an MLflow store of its own.)"""
    import torch
    from mlflow.tracking import MlflowClient

    address = ray_session.get_runtime_context().gcs_address
    ray_tmp = Path(tempfile.mkdtemp(prefix="mx-"))
    common = [f"--set={o}" for o in SMALL + ["resources.clients_on=coordinator",
                                             f"data.partitions_dir={tmp_path / 'p'}"]]
    uri = made_store(mlflow_store_made, tmp_path / "local-store")
    on_ray = started("configs/default.yaml", "--quiet", "--address", address, *common,
                     f"--set=checkpoint.dir={tmp_path / 'ray'}",
                     f"--set=tracking.uri={made_store(mlflow_store_made, tmp_path / 'ray-store')}")
    local = started("configs/default.yaml", "--quiet", *common, f"--set=checkpoint.dir={tmp_path / 'local'}",
                    f"--set=tracking.uri={uri}", env_extra={"TMPDIR": str(ray_tmp)})
    on_ray, local = finished(on_ray), finished(local)
    assert on_ray.returncode == 0, on_ray.stderr
    assert local.returncode == 0, local.stderr
    assert ray_processes_of(str(ray_tmp)) == [] and not (ray_tmp / "ray").exists()  # Ray never started

    ray_dir, local_dir = only_run(tmp_path / "ray"), only_run(tmp_path / "local")
    assert metrics_of(local_dir) == metrics_of(ray_dir)
    a, b = (torch.load(d / "final_state.pt", weights_only=True)["model"] for d in (ray_dir, local_dir))
    assert all(torch.equal(a[k], b[k]) for k in a)
    [actors] = json.loads((local_dir / "actors.json").read_text())
    assert actors["without_ray"] is True and actors["node_id"] is None

    run_id = json.loads((local_dir / "run.json").read_text())["mlflow_run_id"]
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params["algorithm.name"] == "fedavg"
    # named by what its --set changes (not where it is kept or spread: checkpoint, partitions, tracking, resources)
    assert run.info.run_name == "default-fedavg-s0 num_clients=6 clients_per_round=5 rounds=4 group_steps=4"
    assert [m.step for m in client.get_metric_history(run_id, "round")] == [1, 2, 3, 4]
    assert {a.path for a in client.list_artifacts(run_id)} >= {"accuracy.png", "final_state.pt", "metrics.jsonl"}


def test_a_methods_bug_without_ray_is_one_line(tmp_path, mlflow_store_made):
    """A method whose client code divides by zero in round 2, run without Ray: one line naming the method, hook,
    client and round, the traceback's last frames below it, exit 1; the MLflow run FAILED with the hook as a tag."""
    from mlflow.tracking import MlflowClient

    flag = tmp_path / "fault"
    flag.touch()
    uri = made_store(mlflow_store_made, tmp_path)
    done = mooring_run("configs/default.yaml", "--quiet", *[f"--set={o}" for o in SMALL + [
        "algorithm.name=tests.faulty_methods:FailingClient", f"algorithm.failing_client.flag={flag}",
        "algorithm.failing_client.round=2", "train.engine=sequential", f"checkpoint.dir={tmp_path / 'runs'}",
        f"data.partitions_dir={tmp_path / 'p'}", f"tracking.uri={uri}"]])
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("error: round 2 failed: failing_client's client_result raised ZeroDivisionError")
    assert "(client 0, round 2)" in lines[0] and lines[-1].endswith("in client_result: return 1 / 0")
    run_id = json.loads((only_run(tmp_path / "runs") / "run.json").read_text())["mlflow_run_id"]
    run = MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.info.status == "FAILED" and run.data.tags["error.hook"] == "client_result"


# rounds of about 15 ms here: the SIGTERM, sent once the first rounds are in metrics.jsonl, lands seconds before the end
STOPPED_ROUNDS = 200


def test_a_stopped_run_without_ray_resumes_to_the_uninterrupted_history(tmp_path):
    """SIGTERM during the rounds of a run without Ray: a checkpoint, exit status of a stop, and `--resume` ends
    with the history of a run never stopped (which runs meanwhile)."""
    overrides = [f"--set={o}" for o in ["data.num_clients=6", "train.clients_per_round=5",
                                        f"train.rounds={STOPPED_ROUNDS}", "checkpoint.every=50",
                                        f"data.partitions_dir={tmp_path / 'p'}", "tracking.enabled=false"]]
    stopped = started("configs/default.yaml", "--quiet", *overrides, f"--set=checkpoint.dir={tmp_path / 'stopped'}")
    whole = started("configs/default.yaml", "--quiet", *overrides, f"--set=checkpoint.dir={tmp_path / 'whole'}")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((tmp_path / "stopped").glob("*/metrics.jsonl")):
        time.sleep(0.05)
    stopped.send_signal(signal.SIGTERM)
    err = finished(stopped, 120).stderr
    assert stopped.returncode != 0 and "Traceback" not in err
    run_dir = only_run(tmp_path / "stopped")
    assert "--resume" in err and len(metrics_of(run_dir)) < STOPPED_ROUNDS
    resumed = mooring_run("--resume", str(run_dir), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    whole = finished(whole)
    assert whole.returncode == 0, whole.stderr
    assert metrics_of(run_dir) == metrics_of(only_run(tmp_path / "whole"))


def test_tracking_whose_process_dies_turns_off_in_one_warning(tmp_path, capsys, mlflow_store_made):
    """The tracking process killed mid-run: tracking off, said once; what was written before stays in the store,
    and `end` writes what the child never did from this process: the MLflow run ends with every metric, tagged
    with why (calls after the end go nowhere)."""
    from mlflow.tracking import MlflowClient

    from orchestrator.reporting.tracker_process import TrackerProcess

    uri = made_store(mlflow_store_made, tmp_path)
    tracker = TrackerProcess.launch().configure(uri, "lost")
    tracker.open()
    run_id = tracker.start("lost-run", {"a": 1}, {"t": "x"})
    tracker.log_metrics({"accuracy": 0.5}, step=1)
    tracker.flush()
    tracker.process.kill()
    tracker.process.join(timeout=30)
    tracker.log_metrics({"accuracy": 0.6}, step=2)
    tracker.end("FINISHED")
    tracker.set_tags({"after": "death"})
    tracker.close()
    assert tracker.enabled is False
    assert capsys.readouterr().err.count("MLflow tracking off for this run: its process ended") == 1
    client = MlflowClient(tracking_uri=uri)
    assert [m.value for m in client.get_metric_history(run_id, "accuracy")] == [0.5, 0.6]
    run = client.get_run(run_id)
    assert run.data.params == {"a": "1"} and run.info.status == "FINISHED"
    assert run.data.tags["mlflow_tracking_lost"] == "its process ended" and "after" not in run.data.tags


def test_a_lost_tracking_process_reports_no_logged_steps(tmp_path, mlflow_store_made):
    """A resume asks which rounds MLflow holds: with the tracking process gone the answer is none (a disabled
    Tracker's), not a failure."""
    from orchestrator.reporting.tracker_process import TrackerProcess

    tracker = TrackerProcess.launch().configure(made_store(mlflow_store_made, tmp_path), "lost")
    tracker.start("r", {}, {})
    tracker.process.kill()
    tracker.process.join(timeout=30)
    assert tracker.logged_steps("round") == set()
    tracker.close()


def run_as_a_task(cfg):
    """A run as `compare` and `sweep` run theirs (a Ray task); the task's process id and the run's directory."""
    from orchestrator.driver.run import run_experiment

    return os.getpid(), run_experiment(cfg, progress=False).run_dir


@pytest.mark.ray
def test_a_run_that_is_a_ray_task_trains_its_clients_in_the_task_s_own_process(ray_session, workdir):
    """Where its clients train in the coordinator, a run that is a Ray task (a compare job, a sweep trial) keeps its
    coordinator in the task's process: the process that hosted its clients (actors.json) is the task's, on Ray's
    node; with client actors asked for, the coordinator is an actor again and the clients are elsewhere."""
    from orchestrator.experiment.config import load_config

    task = ray_session.remote(num_cpus=0, max_retries=0)(run_as_a_task)
    for clients_on, in_task in (("coordinator", True), ("actors", False)):
        cfg = load_config("configs/default.yaml", [*workdir, *SMALL, f"resources.clients_on={clients_on}",
                                                   "resources.num_actors=1"])
        pid, run_dir = ray_session.get(task.remote(cfg))
        [host] = json.loads((Path(run_dir) / "actors.json").read_text())
        assert (host["pid"] == pid) is in_task and host.get("in_coordinator", False) is in_task, host
        assert host["node_id"] == ray_session.get_runtime_context().get_node_id()


def test_a_coordinator_in_the_driver_s_process_runs_no_round_beside_the_plotting_import(tmp_path):
    """matplotlib is imported in a thread while the run starts; a coordinator in this process (no Ray) would
    otherwise run its first rounds taking turns with that import for the GIL. Each round (the throwaway one
    included) is watched for the import's thread, on an untracked run, whose start has no MLflow to wait for."""
    code = f"""
import threading
from orchestrator.server import federation
from orchestrator.driver.run import run_experiment
from orchestrator.experiment.config import load_config
real, importing = federation.Server.run_round, []
def watched(self, *args, **kwargs):
    importing.append(any(t.name == "mooring-import-matplotlib" and t.is_alive() for t in threading.enumerate()))
    return real(self, *args, **kwargs)
federation.Server.run_round = watched
cfg = load_config("configs/default.yaml", {SMALL + ["tracking.enabled=false", f"checkpoint.dir={tmp_path / 'r'}",
                                                    f"data.partitions_dir={tmp_path / 'p'}"]!r})
result = run_experiment(cfg, progress=False)
print(importing, len(result.phases.get("start: wait for matplotlib", [])))
"""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    importing, waits = done.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert importing == str([False] * 5) and waits == "1"  # the throwaway round and the 4 rounds
