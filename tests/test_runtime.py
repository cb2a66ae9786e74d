"""The Ray runtime for real: client actors, the coordinator, MLflow, checkpoints, resume, faults."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest
import torch

from orchestrator.driver.run import run_experiment
from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import run_in_process
from tests.checkpoint_devices import saved_devices

pytestmark = pytest.mark.ray
FAST = ["train.rounds=4", "train.local_epochs=1", "data.num_clients=6", "checkpoint.every=2"]


def deterministic(history):
    return [{k: v for k, v in m.items() if k != "seconds"} for m in history]


def test_same_history_whatever_the_number_of_actors_and_in_process(ray_session, workdir):
    """On 1 or 3 client actors, in the coordinator's process (resources.clients_on), and in one process without
    Ray: the same history, whether the driver asks for one round a call or several (resources.rounds_per_call). The
    coordinator that trains takes one actor's CPUs, and gives them back at the end."""
    import ray

    actors = FAST + workdir + ["resources.clients_on=actors"]
    one = run_experiment(load_config("configs/default.yaml", actors + ["resources.num_actors=1",
                                                                       "resources.rounds_per_call=1"]), progress=False)
    three = run_experiment(load_config("configs/default.yaml", actors + ["resources.num_actors=3", "resources.cpus_per_actor=0.5"]),
                           progress=False)
    here = run_experiment(load_config("configs/default.yaml", FAST + workdir + ["resources.clients_on=coordinator",
                                                                                 "resources.rounds_per_call=3"]),
                          progress=False)
    assert one.history == three.history == here.history
    assert one.history[-1]["accuracy"] > 0.1
    (host,) = json.loads(open(os.path.join(here.run_dir, "actors.json")).read())
    assert host["in_coordinator"] and host["clients"] == list(range(6)) and host["assigned"] == {"CPU": 1.0}
    # partial sums are on by default: the update calls are named update_summed (client_calls.ClientCall.name)
    assert "update_summed: host work in the coordinator" in here.phases
    assert not any("actor host work" in phase for phase in here.phases)
    assert ray.available_resources().get("CPU") == ray.cluster_resources()["CPU"]
    cfg = load_config("configs/default.yaml", FAST + workdir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert run_in_process(cfg, prepare_data(cfg)) == one.history
    finally:
        torch.set_num_threads(threads)


def test_resume_continues_to_the_uninterrupted_history(ray_session, workdir):
    """Local, 2 of 6 clients a round, one state in memory per actor: each checkpoint names only the state files
    of the clients trained since the previous one, and the resumed run reads them back."""
    from orchestrator.io import checkpoint as ckpt
    from orchestrator.server.sampling import sample_clients

    cfg = load_config("configs/default.yaml", FAST + workdir + ["algorithm.name=local", "resources.num_actors=2",
                                                                 "resources.resident_clients=1", "resources.clients_on=coordinator",
                                                                 "train.clients_per_round=2"])
    full = run_experiment(cfg, progress=False)
    stopped = run_experiment(cfg, progress=False, stop_after=2)
    assert stopped.rounds == 2
    assert saved_devices(f"{stopped.run_dir}/checkpoints/round-000002") == {"cpu"}
    resumed = run_experiment(cfg, progress=False, resume_dir=stopped.run_dir)
    assert resumed.history == full.history  # Local's per-client models came back from the run directory

    def trained(rounds):  # {client: the last of `rounds` (1-based) it trained in}
        return {c: t + 1 for t in rounds for c in sample_clients(cfg.seed, t, 6, 2)}

    for round_idx, previous, rounds in ((2, None, range(0, 2)), (4, 2, range(2, 4))):
        manifest = json.load(open(f"{stopped.run_dir}/checkpoints/{ckpt.checkpoint_name(round_idx)}/manifest.json"))
        assert manifest["previous"] == previous
        assert {int(c): e["round"] for c, e in manifest["client_states"].items()} == trained(rounds)
    assert trained(range(2, 4)) != trained(range(0, 4))  # some client's state at round 4 is in round 2's entry
    on_disk = sorted(os.listdir(f"{stopped.run_dir}/client_states"))
    assert on_disk == sorted({f"c{c}.r{r:06d}.pt" for c, r in trained(range(0, 2)).items()}
                             | {f"c{c}.r{r:06d}.pt" for c, r in trained(range(0, 4)).items()})  # the rest pruned
    assert set(ckpt.client_state_files(f"{stopped.run_dir}/checkpoints/round-000004")) == set(trained(range(4)))
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    assert resumed.mlflow_run_id == stopped.mlflow_run_id
    steps = [m.step for m in client.get_metric_history(resumed.mlflow_run_id, "personalized_accuracy")]
    assert sorted(steps) == [1, 2, 3, 4]  # every round once: none missing, none logged twice


# availability, spread speeds and bandwidths, a deadline some clients miss with twice the clients needed, dropouts
PARTICIPATION = ["train.clients_per_round=3", "participation.availability.kind=bernoulli",
                 "participation.system.speed.sigma=1.0", "participation.system.bandwidth.sigma=1.0",
                 "participation.deadline=2.0", "participation.over_selection=1.0", "participation.dropout=0.2"]


def test_mlflow_holds_params_metrics_tags_and_artifacts(ray_session, workdir):
    """Under the participation block (tests/test_participation.py): the same history on 1 and 2 actors, and the
    simulated clock in MLflow and result.json."""
    from mlflow.tracking import MlflowClient

    cfg = load_config("configs/default.yaml", FAST + workdir + PARTICIPATION + ["algorithm.name=fedprox",
                                                                                 "resources.num_actors=2"])
    result = run_experiment(cfg, progress=False)
    one = run_experiment(load_config("configs/default.yaml", FAST + workdir + PARTICIPATION + [
        "algorithm.name=fedprox", "resources.num_actors=1"]), progress=False)
    assert one.history == result.history
    assert sum(m["clients_late"] + m["clients_dropped"] + m["clients_unused"] for m in result.history) > 0
    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["algorithm.fedprox.mu"] == "0.01"  # the paper default, resolved
    assert run.data.params["train.rounds"] == "4" and run.data.params["algorithm.name"] == "fedprox"
    assert run.data.tags["algorithm"] == "fedprox" and run.data.tags["seed"] == "0"
    assert len(run.data.tags["partition_hash"]) == 16
    assert int(run.data.tags["partition_draws"]) >= 1 and run.data.tags["partition_moved"] == "0"
    acc = client.get_metric_history(result.mlflow_run_id, "accuracy")
    assert [m.step for m in acc] == [1, 2, 3, 4]
    assert [m.value for m in acc] == [h["accuracy"] for h in result.history]
    clock = client.get_metric_history(result.mlflow_run_id, "simulated_seconds")
    by_round = {m.step: m.value for m in clock}
    assert [by_round[r] for r in (1, 2, 3, 4)] == pytest.approx([h["simulated_seconds"] for h in result.history])
    assert json.load(open(f"{result.run_dir}/result.json"))["simulated_seconds"] == result.history[-1]["simulated_seconds"]
    artifacts = {a.path for a in client.list_artifacts(result.mlflow_run_id)}
    assert {"config.yaml", "accuracy.png", "accuracy_time.png", "final_state.pt", "metrics.jsonl"} <= artifacts


def test_unreachable_tracking_server_warns_once_and_the_run_goes_on(ray_session, workdir, capsys, tmp_path):
    cfg = load_config("configs/default.yaml", FAST + workdir + ["tracking.uri=http://127.0.0.1:9"])
    result = run_experiment(cfg, progress=False)
    err = capsys.readouterr().err
    assert err.count("warning: MLflow tracking off") == 1 and "unreachable" in err
    assert result.mlflow_run_id is None and result.rounds == 4
    lines = open(os.path.join(result.run_dir, "metrics.jsonl")).read().splitlines()
    assert [json.loads(line)["round"] for line in lines] == [1, 2, 3, 4]


def test_a_killed_client_actor_is_restarted_and_its_clients_retried(ray_session, workdir):
    """Killed in round 2 of Local with one state in memory per actor: the restarted actor reads its clients'
    round-1 states back from the run directory (not the checkpoint's), so the history is the uninterrupted one."""
    import ray

    from orchestrator.ray_runtime.actors import CoordinatorActor

    cfg = load_config("configs/default.yaml", workdir + ["data.num_clients=4", "train.local_epochs=100", "train.engine=sequential",
                                                         "resources.num_actors=2", "train.rounds=3", "algorithm.name=local",
                                                         "resources.resident_clients=1"])
    data = prepare_data(cfg)
    run_dir = str(cfg.checkpoint.dir) + "/kill"
    coordinator = CoordinatorActor.remote(cfg, 2, run_dir)
    ray.get(coordinator.start.remote([ray.put(data)]))
    first = ray.get(coordinator.run_round.remote())
    victim = ray.get(coordinator.actor_info.remote())[1]["pid"]
    working = psutil.Process(victim)
    cpu_before = sum(working.cpu_times()[:2])
    in_flight = coordinator.run_round.remote()
    # killed once it is seen training (its CPU time grows) and while the round is observed still in flight; its
    # round takes over 10 times the CPU time waited for here, so that it is caught mid-round on a fast machine too
    while sum(working.cpu_times()[:2]) - cpu_before < 0.03:
        assert not ray.wait([in_flight], timeout=0.05)[0], "the round ended before the victim was seen working"
    assert not ray.wait([in_flight], timeout=0)[0]
    os.kill(victim, signal.SIGKILL)
    second = ray.get(in_flight)
    third = ray.get(coordinator.run_round.remote())
    info = ray.get(coordinator.actor_info.remote())
    assert info[1]["pid"] != victim and info[1]["restarts"] == 1 and info[0]["restarts"] == 0  # restarted once
    recorded = json.loads(open(os.path.join(run_dir, "actors.json")).read())  # actors.json follows the restart
    assert [(a["pid"], a["restarts"]) for a in recorded] == [(a["pid"], a["restarts"]) for a in info]
    for m in (first, second, third):
        assert m["clients"] == 4 and m["clients_failed"] == 0  # every client retried once and done
    ray.kill(coordinator)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert [first, second, third] == run_in_process(cfg, data)
    finally:
        torch.set_num_threads(threads)


def cli(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "RAY_AUTH_MODE": "disabled"})


def test_bad_address_is_one_clear_line(workdir):
    # the data is prepared while Ray is reached: its partition goes to the test's directory, not the repository
    out = cli("run", "configs/default.yaml", *[f"--set={o}" for o in workdir], "--address", "127.0.0.1:9")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: --address 127.0.0.1:9: no Ray cluster reachable there (Connection refused); start one with "
        "`ray start --head` or leave out --address for a local one"]


def test_an_unreachable_ray_address_variable_is_one_clear_line(workdir):
    """RAY_ADDRESS is the cluster a command joins without --address: checked as --address is (ray.init would hang)."""
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", "configs/default.yaml",
                          *[f"--set={o}" for o in workdir]], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": "127.0.0.1:9"})
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: RAY_ADDRESS 127.0.0.1:9: no Ray cluster reachable there (Connection refused); start one with "
        "`ray start --head` or unset RAY_ADDRESS for a local one"]


def test_run_cli_output_json(tmp_path):
    path = tmp_path / "result.json"
    overrides = [f"--set={o}" for o in FAST + [f"checkpoint.dir={tmp_path}/runs", f"data.partitions_dir={tmp_path}/p",
                                               f"tracking.uri=sqlite:///{tmp_path}/m.db", "algorithm.name=local"]]
    out = cli("run", "configs/default.yaml", *overrides, "--output-json", str(path), "--quiet")
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(path.read_text())
    assert {"final_accuracy", "best_accuracy", "personalized_accuracy", "rounds", "wall_seconds", "mlflow_run_id",
            "history"} <= set(result)
    assert result["rounds"] == 4 and len(result["history"]) == 4
    # Local has no global model: its global figures are null, never its personalized ones
    assert result["final_accuracy"] is None and result["best_accuracy"] is None
    for key in ("personalized_accuracy", "best_personalized_accuracy"):
        assert 0.0 <= result[key] <= 1.0
    assert result["best_personalized_accuracy"] >= result["personalized_accuracy"]
    assert "MLflow run" in out.stdout and result["mlflow_run_id"] in out.stdout


def test_a_dead_coordinator_leaves_a_checkpoint_to_resume_from(ray_session, workdir):
    import ray

    from orchestrator.driver.run_errors import RunError
    from orchestrator.ray_runtime.placement import coordinator_name

    # MOON's clients keep their previous model; one state in memory per actor, the rest read back from disk
    cfg = load_config("configs/default.yaml", FAST + workdir + ["resources.num_actors=2", "algorithm.name=moon",
                                                                 "resources.resident_clients=1"])
    full = run_experiment(cfg, progress=False)
    run_dir = os.path.join(cfg.checkpoint.dir, "killed")

    coordinator_pid = []

    def kill_coordinator_after_round_2(metrics):
        # The driver asks for round t+1 before it reports round t, and the coordinator answers calls in order:
        # its pid is asked for in round 1 (answered once round 2 is done), and it is killed in round 3.
        if metrics["round"] == 1:
            coordinator_pid.append(ray.get(ray.get_actor(coordinator_name(run_dir)).pid.remote()))
        if metrics["round"] == 2:
            os.kill(coordinator_pid[0], signal.SIGKILL)

    # round 3 is normally still running when the kill lands; the driver's pipelined calls and a loaded machine can
    # let a round or two more finish first (seen: round 4): where it dies does not matter, the resume does
    with pytest.raises(RunError, match=r"the coordinator died after round [2-9] .*continue with `mooring run --resume"):
        run_experiment(cfg, progress=False, on_round=kill_coordinator_after_round_2, run_dir=run_dir)
    resumed = run_experiment(cfg, progress=False, resume_dir=run_dir)
    assert resumed.history == full.history
