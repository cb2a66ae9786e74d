"""MLflow tracking's process (orchestrator/reporting/tracker_process.py) stopped (SIGSTOP: a debugger, a suspended
laptop) or gone: no wait on it is unbounded, tracking goes off in one warning, the run goes on to its summary, and
the MLflow run is completed from the driver's process rather than left RUNNING with no steps; a stop signal ends
the driver even while it waits on a stopped child."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

from tests.test_local_coordinator import made_store, started

WARNING = "warning: MLflow tracking off for this run: "
ROUNDS = 60


def tracking_child(driver: psutil.Process, deadline: float) -> psutil.Process:
    """The driver's MLflow tracking process (multiprocessing's spawn child; not its resource tracker)."""
    while time.monotonic() < deadline:
        for child in driver.children():
            with suppress(psutil.Error):
                if any("spawn_main" in part for part in child.cmdline()):
                    return child
        time.sleep(0.05)
    raise AssertionError("no tracking process appeared")


def wait_for(directory: Path, pattern: str, ready, deadline: float, proc) -> Path:
    """The first file under `directory` matching `pattern` that is `ready`, while the run goes on."""
    while time.monotonic() < deadline:
        found = [p for p in directory.glob(pattern) if ready(p)]
        if found:
            return found[0]
        assert proc.poll() is None, f"the run ended first: {proc.communicate()}"
        time.sleep(0.05)
    raise AssertionError(f"no {pattern} in {directory}")


def has_run_id(path: Path) -> bool:
    with suppress(ValueError, OSError):
        return bool(json.loads(path.read_text()).get("mlflow_run_id"))
    return False


def release(child: psutil.Process | None) -> None:
    """A stopped child left behind by a failed test: continued and killed."""
    if child is not None:
        with suppress(psutil.Error):
            child.resume()
            child.kill()


def run_with_stopped_tracking(tmp_path, mlflow_store_made, timeout: str, stop_when: str):
    """`mooring run` (no Ray, ROUNDS rounds) whose tracking process is stopped once its MLflow run exists; then,
    with stop_when="end", SIGTERM once the rounds are over (the driver then waits on the child at the end).
    Returns (completed process, stopped child, MLflow URI, run directory)."""
    uri = made_store(mlflow_store_made, tmp_path / "store")
    runs = tmp_path / "runs"
    proc = started("configs/default.yaml", "--quiet", *[f"--set={o}" for o in [
        "data.num_clients=6", "train.clients_per_round=5", f"train.rounds={ROUNDS}", "checkpoint.every=20",
        f"data.partitions_dir={tmp_path / 'p'}", f"checkpoint.dir={runs}", f"tracking.uri={uri}"]],
        env_extra={"MOORING_TRACKING_TIMEOUT": timeout})
    child = None
    try:
        deadline = time.monotonic() + 240
        child = tracking_child(psutil.Process(proc.pid), deadline)
        run_json = wait_for(runs, "*/run.json", has_run_id, deadline, proc)
        child.suspend()
        if stop_when == "end":  # result.json is written after the rounds, before the artifacts go to MLflow
            wait_for(run_json.parent, "result.json", Path.exists, deadline, proc)
            proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=240)  # a guard: a driver that hung on its child fails here
        except subprocess.TimeoutExpired:
            raise AssertionError("the run did not end while its tracking process was stopped") from None
        gone, alive = psutil.wait_procs([child], timeout=60)
        assert not alive, "the stopped tracking process outlived the run"
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), uri, run_json.parent
    finally:
        release(child)  # first: a stopped child holds the run's output open
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def mlflow_run(uri: str, run_dir: Path):
    from mlflow.tracking import MlflowClient

    run_id = json.loads((run_dir / "run.json").read_text())["mlflow_run_id"]
    client = MlflowClient(tracking_uri=uri)
    return client.get_run(run_id), [m.step for m in client.get_metric_history(run_id, "round")]


def test_a_run_whose_tracking_process_stops_ends_with_its_summary_and_a_complete_mlflow_run(tmp_path,
                                                                                             mlflow_store_made):
    """The tracking process SIGSTOPped once the MLflow run exists: after MOORING_TRACKING_TIMEOUT the child is
    killed with one warning, the run ends 0 with its summary, and the MLflow run is FINISHED with every round
    (written from the driver), its summary and artifacts, tagged with why."""
    done, uri, run_dir = run_with_stopped_tracking(tmp_path, mlflow_store_made, "2", stop_when="never")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(WARNING + "its process did not answer in 2 s"), warnings
    assert f"{ROUNDS} rounds in" in done.stdout and "run directory:" in done.stdout
    run, steps = mlflow_run(uri, run_dir)
    assert run.info.status == "FINISHED" and steps == list(range(1, ROUNDS + 1))
    assert run.data.tags["mlflow_tracking_lost"].startswith("its process did not answer")
    assert run.data.metrics["rounds"] == ROUNDS
    from mlflow.tracking import MlflowClient

    assert {a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(run.info.run_id)} >= {
        "final_state.pt", "metrics.jsonl", "result.json"}


def test_sigterm_ends_a_driver_waiting_on_a_stopped_tracking_process(tmp_path, mlflow_store_made):
    """The tracking process SIGSTOPped and its answers waited for up to 600 s: a SIGTERM once the rounds are over
    (the driver waits on the child for its artifacts) ends the driver: one warning, `interrupted`, and the MLflow
    run KILLED with every round rather than left RUNNING."""
    done, uri, run_dir = run_with_stopped_tracking(tmp_path, mlflow_store_made, "600", stop_when="end")
    assert done.returncode == 130, done.stderr
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and lines[-1] == "interrupted", lines
    warnings = [line for line in lines if line.startswith("warning:")]
    assert warnings == [WARNING + "its process did not answer within 5 s of the stop signal; what it had not written "
                        "goes to the MLflow run when the run ends (metrics are in the run directory meanwhile)"], lines
    run, steps = mlflow_run(uri, run_dir)
    assert run.info.status == "KILLED" and steps == list(range(1, ROUNDS + 1))


@pytest.mark.timeout(180)  # a guard: a send that blocked on the stopped child would hang here
def test_a_stopped_child_found_during_the_rounds_and_its_calls_done_here(tmp_path, capsys, mlflow_store_made,
                                                                          monkeypatch):
    """In one process: a child stopped after writing round 1; metrics sent meanwhile fill its pipe, which blocks
    the sending thread and not the caller; the overdue answer is found by a later send without waiting, the child
    is killed (it was stopped), and `end` writes the rounds it never did, and a tag set meanwhile, here."""
    from mlflow.tracking import MlflowClient

    from orchestrator.reporting.tracker_process import TrackerProcess

    monkeypatch.setenv("MOORING_TRACKING_TIMEOUT", "1")
    uri = made_store(mlflow_store_made, tmp_path)
    tracker = TrackerProcess.launch().configure(uri, "stopped")
    child = psutil.Process(tracker.process.pid)
    try:
        run_id = tracker.start("stopped-run", {}, {})
        tracker.log_metrics({"round": 1, "accuracy": 0.1}, step=1)
        tracker.flush()
        child.suspend()
        tracker.SEND_SECONDS = 0.0  # a message a round
        wide = {f"m{i}": float(i) for i in range(1000)}
        for step in range(2, 31):
            tracker.log_metrics({"round": step, "accuracy": step / 100, **wide}, step=step)
        assert tracker.channel.outbox.qsize() > 0 and tracker.lost is None  # more than the pipe holds, still queued
        while tracker.lost is None:
            step += 1
            tracker.log_metrics({"round": step, "accuracy": step / 100}, step=step)
            time.sleep(0.01)
        assert tracker.lost == "its process did not answer in 1 s" and tracker.enabled is False
        assert not psutil.wait_procs([child], timeout=30)[1]
        tracker.set_tags({"note": "after"})
        tracker.end("FINISHED")
        tracker.close()
    finally:
        release(child)
    assert capsys.readouterr().err.count(WARNING) == 1
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["note"] == "after"
    assert [m.step for m in client.get_metric_history(run_id, "round")] == list(range(1, step + 1))
    assert [m.step for m in client.get_metric_history(run_id, "m999")] == list(range(2, 31))


@pytest.mark.timeout(180)
def test_a_child_stopped_before_its_first_answer_still_gives_the_run_an_mlflow_run(tmp_path, capsys,
                                                                                    mlflow_store_made, monkeypatch):
    """Stopped before it has answered anything (MLflow's import, the store, the run's start): the set-up's waits
    end (after SETUP_SECONDS, made short here), one warning, and `end` makes the MLflow run from this process, with
    the metrics logged meanwhile and the final status."""
    from mlflow.tracking import MlflowClient

    from orchestrator.reporting import tracker_channel, tracker_process

    monkeypatch.setenv("MOORING_TRACKING_TIMEOUT", "1")
    monkeypatch.setattr(tracker_channel, "SETUP_SECONDS", 1.0)  # the pipe's deadlines (tracker_channel.py)
    uri = made_store(mlflow_store_made, tmp_path)
    tracker = tracker_process.TrackerProcess.launch()
    child = psutil.Process(tracker.process.pid)
    try:
        child.suspend()
        tracker.configure(uri, "early")
        tracker.open()
        assert tracker.start("early-run", {"a": 1}, {"run_dir": str(tmp_path / "run")}) is None
        for step in (1, 2, 3):
            tracker.log_metrics({"round": step, "accuracy": step / 10}, step=step)
        tracker.end("FINISHED")
        tracker.close()
    finally:
        release(child)
    assert capsys.readouterr().err.count(WARNING) == 1
    run = MlflowClient(tracking_uri=uri).get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"a": "1"} and run.info.run_name == "early-run"
    assert run.data.tags["mlflow_tracking_lost"] == "its process did not answer in 1 s"
    assert [m.step for m in MlflowClient(tracking_uri=uri).get_metric_history(run.info.run_id, "round")] == [1, 2, 3]


@pytest.mark.parametrize("value", ["soon", "0", "-3", "inf"])
def test_a_bad_tracking_timeout_is_one_line(value, tmp_path, capsys, monkeypatch):
    from orchestrator import cli

    monkeypatch.setenv("MOORING_TRACKING_TIMEOUT", value)
    assert cli.main(["run", "configs/default.yaml", f"--set=checkpoint.dir={tmp_path}"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: MOORING_TRACKING_TIMEOUT={value}: the seconds an answer from MLflow tracking's process is waited "
        "for must be a positive number"]
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_a_library_turned_into_its_own_error_is_still_an_interrupt(capsys):
    """A SIGTERM while matplotlib's extension module was being imported came back as "ImportError: initialization
    failed" caused by the KeyboardInterrupt: the command ends as interrupted (130) in one line, not a traceback."""
    import types

    from orchestrator.cli import interrupted_inside, run_command

    def main(_args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise ImportError("initialization failed") from interrupt

    assert run_command(types.SimpleNamespace(main=main), None) == 130
    assert capsys.readouterr().err == "interrupted\n"
    assert not interrupted_inside(ValueError("a plain error"))
