"""Nothing silently wrong (issue #36): a failed round never reaches a checkpoint and a resume continues from the
last round that completed; a method's own bug stops the run naming the method, hook, client and round, while a
lost actor is still retried; and a `mooring run` leaves none of its Ray instance's processes behind."""
from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.driver.run import run_experiment
from orchestrator.driver.run_errors import RunError
from orchestrator.experiment.config import load_config
from orchestrator.io import checkpoint as ckpt

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
    assert str(failed.value).startswith("round 3 failed: failing_round_metrics's round_metrics raised KeyError: "
                                        "'cc' (the server, round 3); once the method is fixed: the last checkpoint "
                                        f"is {run_dir}/checkpoints/round-000002;")
    flag.unlink()
    resumed = run_experiment(cfg, progress=False, resume_dir=run_dir)
    assert [m["round"] for m in resumed.history] == [1, 2, 3, 4, 5, 6]
    uninterrupted = run_experiment(cfg, progress=False)
    assert deterministic(resumed.history) == deterministic(uninterrupted.history)


# --------------------------------------------------------------------------------- Ray's processes
def test_a_run_leaves_none_of_its_ray_instance_s_processes_behind(mooring_run_on_its_own_ray):
    """The processes of the local instance `mooring run` started (its dashboard and runtime-env agents included,
    which Ray leaves to notice their raylet's end for about a minute) end with it, seen by their command lines
    naming the instance's session directory: none is left 5 s after it exited (tests/own_ray_run.py: the run
    tests/test_startup.py reads too)."""
    run = mooring_run_on_its_own_ray
    assert run.returncode == 0, run.stderr[-2000:]
    assert any("dashboard/agent.py" in line for line in run.cmdlines)  # the agents were seen running
    assert run.session_left == []


# ------------------------------------------------------------------------------- a method's own bug
CLIENT_BUGS = {  # method: (its block, the hook named, the error's start)
    "FailingClient": ("failing_client", "client_result", "client_result raised ZeroDivisionError: division by zero"),
    "FloatLoss": ("float_loss", "local_loss", {  # under vmap, float() itself raises in local_loss
        "sequential": "local_loss returned a float; it must return the batch's loss as a 0-dim tensor",
        "vectorized": "local_loss raised RuntimeError: vmap: It looks like you're calling .item() on a Tensor"}),
    "PerSampleLoss": ("per_sample_loss", "local_loss", "local_loss returned a tensor of shape (32,); it must return"),
    "ObjectState": ("object_state", None, "{hook} returned a client state holding a tasks.types.ClientData "
                                          "at state['seen']['data']; a client state holds tensors, numbers, strings "
                                          "and None"),
}


@pytest.mark.parametrize("engine", ["sequential", "vectorized"])
@pytest.mark.parametrize("method", sorted(CLIENT_BUGS))
def test_a_method_s_bug_in_client_code_stops_the_call_naming_hook_client_and_round(method, engine, workdir,
                                                                                   tmp_path):
    """A client host (as a client actor runs it, its states written to disk) raises the method's error rather
    than leaving the client out as if its actor were lost; a state that could not be read back is refused before
    it is written."""
    from orchestrator.clients.client_calls import CallKind, ClientCall
    from orchestrator.clients.client_host import ClientHost
    from orchestrator.clients.client_store import ClientStateStore
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import Server
    from tasks.algorithms.faults import MethodError

    block, hook, error = CLIENT_BUGS[method]
    flag = tmp_path / "fault"
    flag.touch()
    cfg = faulty_config(workdir, method, block, flag, 2, f"train.engine={engine}")
    data = prepare_data(cfg)
    host = ClientHost(cfg, data, [0, 1, 2, 3], store=ClientStateStore(str(tmp_path / "states")))
    server = Server(cfg, data)
    with pytest.raises(MethodError) as raised:
        host.call(ClientCall(CallKind.UPDATE, server.algorithm.payload(server.state, 1), [0, 1, 2, 3], 1))
    fault = raised.value.fault
    hook = hook or {"sequential": "client_update", "vectorized": "client_result"}[engine]
    batched = engine == "vectorized" and hook == "local_loss"  # the clients' losses are computed together
    assert (fault.method, fault.hook, fault.round, fault.clients) == (block, hook, 2, (0, 1, 2, 3) if batched else (0,))
    error = (error[engine] if isinstance(error, dict) else error).format(hook=hook)
    assert str(raised.value).splitlines()[0] == fault.headline
    assert fault.headline.startswith(f"{block}'s {error}"), fault.headline
    assert fault.headline.endswith(f" ({'clients 0, 1, 2, 3' if batched else 'client 0'}, round 2)")
    if method == "FailingClient":
        assert fault.frames[-1].endswith("in client_result: return 1 / 0") and "faulty_methods.py:" in fault.frames[-1]
        assert str(raised.value).splitlines()[1:] == [f"  at {frame}" for frame in fault.frames]
    assert not list((tmp_path / "states").glob("*.pt"))  # nothing of the failed call written


def test_a_method_s_bug_on_the_server_names_the_hook_file_line_and_last_frames(workdir, tmp_path):
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import run_in_process
    from tasks.algorithms.faults import MethodError

    flag = tmp_path / "fault"
    flag.touch()
    cfg = faulty_config(workdir, "FailingRoundMetrics", "failing_round_metrics", flag, 1)
    with pytest.raises(MethodError) as raised:
        run_in_process(cfg, prepare_data(cfg))
    fault = raised.value.fault
    assert fault.headline == "failing_round_metrics's round_metrics raised KeyError: 'cc' (the server, round 1)"
    assert fault.frames[-1].endswith('in round_metrics: return {"cc": state["cc"]}')
    assert fault.frames[-1].startswith(f"{Path(__file__).parent / 'faulty_methods.py'}:")
    assert len(fault.frames) > 1  # the frames that led there too


def test_a_full_disk_while_a_client_s_state_is_written_is_an_io_error_not_a_failed_client(workdir, tmp_path):
    """MOON's clients keep their previous model: written on a filesystem too small for them, the call (as a client
    actor makes it) raises the OSError naming the file, which the run reports as a full disk."""
    import errno

    from orchestrator.clients.client_calls import CallKind, ClientCall
    from orchestrator.clients.client_host import ClientHost
    from orchestrator.clients.client_store import ClientStateStore
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import Server
    from tests.test_hardening import tmpfs

    cfg = load_config("configs/default.yaml", workdir + ["data.num_clients=4", "algorithm.name=moon",
                                                         "train.local_epochs=1"])
    data = prepare_data(cfg)
    server = Server(cfg, data)
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        host = ClientHost(cfg, data, [0, 1, 2, 3], store=ClientStateStore(str(disk / "states")))
        with pytest.raises(OSError) as raised:
            host.call(ClientCall(CallKind.UPDATE, server.algorithm.payload(server.state, 0), [0, 1, 2, 3], 0))
    assert raised.value.errno == errno.ENOSPC and raised.value.filename.startswith(str(disk / "states" / "c"))


@pytest.mark.ray
def test_a_method_s_bug_fails_run_and_compare_in_the_terminal_result_json_and_mlflow(ray_session, workdir, tmp_path,
                                                                                     capsys):
    """On client actors: the run stops with the method's error (not the untrained model's accuracy), result.json
    and MLflow (FAILED) say what failed; `mooring compare` marks that variant failed with the reason, finishes
    the others, and exits 1."""
    import json

    import pyarrow.parquet
    from mlflow.tracking import MlflowClient

    from orchestrator import cli

    flag = tmp_path / "fault"
    flag.touch()
    overrides = ["resources.num_actors=2", "train.rounds=3", "checkpoint.every=1", "algorithm.failing_client.round=2"]
    cfg = faulty_config(workdir, "FailingClient", "failing_client", flag, 2, *overrides)
    run_dir = tmp_path / "runs" / "failing"
    with pytest.raises(RunError) as failed:
        run_experiment(cfg, progress=False, run_dir=str(run_dir))
    headline = "failing_client's client_result raised ZeroDivisionError: division by zero (client 0, round 2)"
    first, *frames = str(failed.value).splitlines()
    assert first == (f"round 2 failed: {headline}; once the method is fixed: the last checkpoint is "
                     f"{run_dir}/checkpoints/round-000001; continue with `mooring run --resume {run_dir}`")
    assert frames[-1].startswith("  at ") and frames[-1].endswith("in client_result: return 1 / 0")
    written = json.loads((run_dir / "result.json").read_text())
    assert written["error"]["message"] == first and written["rounds"] == 1
    assert written["error"]["method_fault"]["hook"] == "client_result" and written["error"]["method_fault"]["clients"] == [0]
    client = MlflowClient(cfg.tracking.uri)
    [run] = client.search_runs([client.get_experiment_by_name(cfg.tracking.experiment).experiment_id])
    assert run.info.status == "FAILED"
    assert (run.data.tags["error.hook"], run.data.tags["error.round"], run.data.tags["error.clients"]) == (
        "client_result", "2", "0")
    assert run.data.tags["error"] == str(failed.value)

    out = tmp_path / "compare"
    code = cli.main(["compare", "configs/default.yaml", "--algorithms", f"fedavg,{FAULTY}:FailingClient", "--quiet",
                     "--out", str(out), *[f"--set={o}" for o in workdir + overrides + [
                         "data.num_clients=4", f"algorithm.failing_client.flag={flag}"]]])
    printed = capsys.readouterr()
    assert code == 1
    assert f"  FAILED failing_client: seed 0: round 2 failed: {headline}; once the method is fixed" \
        in printed.out
    assert printed.err.splitlines()[-1] == "error: 1 of 2 runs failed (marked FAILED in the table)"
    rows = {row["variant"]: row for row in pyarrow.parquet.read_table(out / "runs.parquet").to_pylist()}
    assert rows["fedavg"]["failed"] is None and rows["fedavg"]["final_global_accuracy"] > 0.1
    assert rows["failing_client"]["failed"].startswith(f"round 2 failed: {headline}")


def test_a_run_with_clients_lost_says_how_many_in_result_json_and_its_summary(capsys):
    """Clients left out because their actor was lost twice (the only failure a round goes on after) are counted
    over the run's rounds, in result.json and the summary `mooring run` prints."""
    from orchestrator.commands.run import print_summary
    from orchestrator.reporting.results import summarize

    cfg = load_config("configs/default.yaml")
    history = [{"round": 1, "clients_failed": 0, "accuracy": 0.5}, {"round": 2, "clients_failed": 2, "accuracy": 0.6},
               {"round": 3, "clients_failed": 1, "accuracy": 0.7}]
    result = summarize(cfg, history, wall_seconds=1.0, mlflow_run_id=None, run_dir="runs/r")
    assert result.to_json()["clients_failed"] == 3
    print_summary(result, None)
    assert ("  failed clients:      3 (left out of their round: their client actor was lost twice; clients_failed in "
            "metrics.jsonl says which rounds)") in capsys.readouterr().out.splitlines()
    print_summary(summarize(cfg, history[:1], wall_seconds=1.0, mlflow_run_id=None, run_dir="runs/r"), None)
    assert "failed clients" not in capsys.readouterr().out
