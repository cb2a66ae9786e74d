"""`mooring submit` against a real two-node Ray cluster on this machine (tests/cluster_fixture.py), with a real
MLflow tracking server: the Jobs API path end to end, token authentication, a method, model and dataset of the
user's own submitted from their project, actor placement over nodes with fractional (declared) GPUs, and a run
that loses a node mid-way.

The head declares 4 CPUs and 2 GPUs, the second node 1 CPU and 1 GPU. A "blocker" job holds 3 CPUs and 1 GPU
of the head (through a resource only the head has), so 2 actors of 1 CPU and 0.5 GPU can only go one on each
node, whatever Ray's scheduler prefers. The node-loss test kills the second node, then stops the blocker, so
the head has room for the actor the lost node took with it.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.driver.run_errors import RunError
from orchestrator.ray_runtime.cluster import JobsAPI
from tests.cluster_fixture import ROOT, LocalCluster, MlflowServer, NodeDidNotStart, process_tree, wait_until
from tests.conftest import postgres_reachable
from tests.outside_lab import MY_PROX, forget_lab, write_lab

pytestmark = pytest.mark.cluster

ACTORS = ["resources.num_actors=2", "resources.cpus_per_actor=1", "resources.gpus_per_actor=0.5"]
SMALL_RUN = ["train.local_epochs=1"]
JOB_TIMEOUT = 300  # s: a stuck job fails the test instead of hanging it
# what `mooring run` prints at the end (orchestrator/commands/run.py, print_summary)
RUN_SUMMARY = re.compile(re.escape(MY_PROX) + r" \(seed 0\), 2 rounds in [0-9.]+ s\n  global model: +final [0-9.]+ %")
REFUSED = "the Ray cluster at {url} refused the request: authentication token missing or wrong; " \
          "set RAY_AUTH_TOKEN or --token-file"


def test_a_node_that_never_joins_is_started_again_then_refused_in_one_error():
    """Each attempt's `ray start` (here refused: a negative CPU count) is killed and started again after a wait;
    the last failure names every attempt and ends with Ray's own words, and no process is left behind."""
    before = set(process_tree(os.getpid()))
    with pytest.raises(NodeDidNotStart) as refused:
        LocalCluster(head_cpus=-1, attempts=2, backoff=0.1)
    headline, *output = str(refused.value).splitlines()
    assert headline == ("Ray node head did not join the cluster in 2 attempts (attempt 1: ray start for head exited "
                        "with 1; attempt 2: ray start for head exited with 1); the last one's output:")
    assert "Resource quantities must be nonnegative" in "\n".join(output)
    assert set(process_tree(os.getpid())) <= before


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"), postgres=postgres_reachable())
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster(mlflow_server):
    """The Ray cluster; the MLflow server starts at the same time (ready once the cluster is)."""
    c = LocalCluster(head_cpus=4, head_gpus=2, head_resources={"head_slot": 1})
    try:
        c.add_node(num_cpus=1, num_gpus=1)
        mlflow_server.wait_ready()
        yield c
    finally:
        c.shutdown()


@pytest.fixture(scope="module")
def blocker(cluster) -> str:
    """A job holding 3 CPUs and 1 GPU of the head: its id."""
    jobs = cluster.jobs()
    job_id = jobs.submit_job(entrypoint="sleep 3600", entrypoint_num_cpus=3, entrypoint_num_gpus=1,
                             entrypoint_resources={"head_slot": 1})
    wait_until(lambda: jobs.get_job_status(job_id).value == "RUNNING", 120, "the blocker job")
    return job_id


def submit(cluster: LocalCluster, *args: str, home: Path | None = None, cwd: Path = ROOT):
    """`mooring submit --address ... ARGS` as a user runs it, from `cwd` (the directory the job gets): with the
    token in RAY_AUTH_TOKEN, or with none at all when given a `home` (no ~/.ray/auth_token to fall back on)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    if home is None:
        env["RAY_AUTH_TOKEN"] = cluster.token
    else:
        env["HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "submit", "--address", cluster.url, *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT)


def run_args(tmp_path: Path, *overrides: str) -> list[str]:
    sets = [f"checkpoint.dir={tmp_path / 'runs'}", f"data.partitions_dir={tmp_path / 'partitions'}", *overrides]
    return ["run", "configs/default.yaml", *(a for s in sets for a in ("--set", s))]


def run_dir(tmp_path: Path) -> Path:
    (found,) = (tmp_path / "runs").iterdir()
    return found


# ----------------------------------------------------------------------------------- authentication
def test_submit_without_the_token_is_refused_in_one_line(cluster, tmp_path):
    result = submit(cluster, "--no-wait", "--", *run_args(tmp_path, "tracking.enabled=false"), home=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip() == "error: " + REFUSED.format(url=cluster.url)
    assert not (tmp_path / "runs").exists()


def test_a_wrong_token_is_refused_and_the_right_one_accepted(cluster, tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "wrong").write_text("not-the-token\n")
    with pytest.raises(RunError, match=r"refused the request: authentication token missing or wrong") as refused:
        JobsAPI(cluster.url, str(tmp_path / "wrong")).call("list_jobs")
    assert str(refused.value) == REFUSED.format(url=cluster.url)
    (tmp_path / "right").write_text(cluster.token + "\n")
    assert isinstance(JobsAPI(cluster.url, str(tmp_path / "right")).call("list_jobs"), list)


# ---------------------------------------------------------------------------------- a submitted run
@pytest.fixture(scope="module")
def submitted_run(cluster, blocker, mlflow_server, tmp_path_factory):
    """One short run submitted with --follow from a project of the user's own (a temporary directory, not
    Mooring's checkout): its package my_lab (a FedProx-like method, a model and a dataset, tests/outside_lab.py)
    travels as the job's working directory and the nodes run the Mooring installed on them. 2 actors of 0.5 GPU,
    metrics to the MLflow server. The result, the project and the run's --set values."""
    lab = write_lab(tmp_path_factory.mktemp("submitted"))
    sets = [*ACTORS, *SMALL_RUN, "train.rounds=2", f"tracking.uri={mlflow_server.url}",
            "tracking.experiment=cluster-submit"]
    result = submit(cluster, "--follow", "--", "run", "lab.yaml", *(a for s in sets for a in ("--set", s)), cwd=lab)
    return result, lab, sets


def test_submitted_run_succeeds_and_its_results_are_on_the_tracking_server(submitted_run, mlflow_server):
    from mlflow.tracking import MlflowClient

    result, tmp, _ = submitted_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    job_id = result.stdout.splitlines()[0]
    assert job_id.startswith("raysubmit_")
    assert f"{job_id}: SUCCEEDED" in result.stderr
    assert RUN_SUMMARY.search(result.stdout)  # the job's own output, followed

    client = MlflowClient(tracking_uri=mlflow_server.url)
    experiment = client.get_experiment_by_name("cluster-submit")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags["algorithm"] == MY_PROX
    assert run.data.tags["seed"] == "0"
    assert run.data.tags["run_dir"] == str(run_dir(tmp))
    for metric in ("accuracy", "train_loss", "bytes_total"):
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, metric)) == [1, 2], metric
    local = json.loads((run_dir(tmp) / "result.json").read_text())
    assert local["mlflow_run_id"] == run.info.run_id
    assert run.data.metrics["accuracy"] == pytest.approx(local["history"][-1]["accuracy"])


def test_the_outside_method_ran_on_the_cluster_as_in_one_process(submitted_run, monkeypatch):
    """The user's method, model and dataset, imported by the job's driver and client actors from the uploaded
    project, give the history the same run has in one process."""
    from orchestrator.experiment.config import load_config
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import run_in_process

    result, lab, sets = submitted_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert run_dir(lab).name.startswith("lab-my_prox-s0-")  # the outside method's own name
    history = json.loads((run_dir(lab) / "result.json").read_text())["history"]
    monkeypatch.chdir(lab)
    monkeypatch.syspath_prepend(str(lab))
    forget_lab()
    try:
        cfg = load_config("lab.yaml", [s for s in sets if not s.startswith("tracking.")] + ["tracking.enabled=false"])
        assert [m["round"] for m in history] == [1, 2]
        assert history == run_in_process(cfg, prepare_data(cfg))
    finally:
        forget_lab()


def test_jobs_lists_shows_and_prints_the_logs_of_the_submitted_job(submitted_run, cluster, monkeypatch, capsys):
    monkeypatch.setenv("RAY_AUTH_TOKEN", cluster.token)
    job_id = submitted_run[0].stdout.splitlines()[0]
    assert main(["jobs", "list", "--address", cluster.url]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split() == ["id", "status", "started", "entrypoint"]
    assert any(line.split()[:2] == [job_id, "SUCCEEDED"] for line in listed[1:])
    assert main(["jobs", "status", job_id, "--address", cluster.url]) == 0
    status = capsys.readouterr().out
    assert status.startswith(f"{job_id}: SUCCEEDED\n") and "command  python -m orchestrator.cli run" in status
    assert main(["jobs", "logs", job_id, "--address", cluster.url]) == 0
    assert RUN_SUMMARY.search(capsys.readouterr().out)


def test_actors_spread_over_both_nodes_with_the_gpu_share_they_asked_for(submitted_run, cluster):
    _, tmp, _ = submitted_run
    actors = json.loads((run_dir(tmp) / "actors.json").read_text())
    assert sorted(a["node_id"] for a in actors) == sorted(n.node_id for n in cluster.nodes)
    for actor in actors:
        assert actor["assigned"] == {"CPU": 1.0, "GPU": 0.5}
        assert len(actor["gpu_ids"]) == 1  # a share of one GPU
        assert actor["device"] == "cpu"  # declared GPUs only: no CUDA here
    assert sorted(c for a in actors for c in a["clients"]) == list(range(4))


# ------------------------------------------------------------------------------------ losing a node
def test_run_finishes_after_losing_a_node_mid_run(cluster, blocker, tmp_path, monkeypatch, capsys):
    result = submit(cluster, "--no-wait", "--", *run_args(
        tmp_path, *ACTORS, *SMALL_RUN, "train.rounds=4", "checkpoint.every=1", "tracking.enabled=false"))
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.split()[0]
    # actors.json is written once the run is set up, just before its first round: kill the second node then.
    actors_file = wait_until(lambda: next((tmp_path / "runs").glob("*/actors.json"), None), JOB_TIMEOUT,
                             "the run's actors.json", poll=0.05)
    doomed = cluster.nodes[1]
    killed = cluster.kill_node(doomed)
    (victim,) = [a for a in json.loads(actors_file.read_text()) if a["node_id"] == doomed.node_id]
    assert victim["pid"] in killed

    monkeypatch.setenv("RAY_AUTH_TOKEN", cluster.token)
    assert main(["jobs", "stop", blocker, "--address", cluster.url]) == 0  # room on the head for the lost actor
    assert capsys.readouterr().out == f"stopping {blocker}\n"
    jobs = cluster.jobs()
    status = wait_until(lambda: (s := jobs.get_job_status(job_id).value) in ("SUCCEEDED", "FAILED", "STOPPED") and s,
                        JOB_TIMEOUT, "the job to end")
    assert status == "SUCCEEDED", jobs.get_job_logs(job_id)[-4000:]
    outcome = json.loads((run_dir(tmp_path) / "result.json").read_text())
    assert [m["round"] for m in outcome["history"]] == [1, 2, 3, 4]
    assert all(m["clients"] == 10 for m in outcome["history"])
    # the lost actor's clients are retried on its restarted self: none fails, or (if the restart outlasts the
    # retry) only the clients it trained, in the one round it died in: a round of this run (about 40 expected
    # steps) is one group of clients (train.group_steps: auto), all 10 on one actor
    failed = [m["clients_failed"] for m in outcome["history"]]
    assert all(f in (0, 10) for f in failed) and sum(f > 0 for f in failed) <= 1, failed
    # actors.json follows the restart: same clients, a new pid, on the head, one restart
    (moved,) = [a for a in json.loads(actors_file.read_text()) if a["restarts"] > 0]
    assert (moved["clients"], moved["node_id"], moved["restarts"]) == (victim["clients"], cluster.head.node_id, 1)
    assert moved["pid"] not in killed

    ray_job = jobs.get_job_info(job_id).job_id
    actors = cluster.state("actors", job_id=ray_job, class_name="ClientActor")
    (restarted,) = [a for a in actors if int(a["num_restarts"]) > 0]  # the one lost with the node, mid-run
    assert restarted["node_id"] == cluster.head.node_id  # restarted on the head
