"""`mooring sweep`: Optuna trials on the shared Ray instance, with real SQLite storage and a real MLflow store.

One small sweep (run once for the module) has trials whose fate is fixed by enqueued parameters: two identical
good trials complete, a partition that cannot exist fails, a learning rate too small to learn is pruned by the
median pruner after round 1, and one so large that the loss turns NaN is pruned as diverged. A second sweep is
killed part-way (SIGKILL on its driver) and resumed. Bad sweep files are refused in one line, before any Ray.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator import cli
from orchestrator.experiment.config import load_config

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "configs" / "default.yaml"
TINY = {"train.rounds": 3, "data.num_clients": 5, "data.partition.alpha": 1.0, "data.partition.min_size": 5,
        "train.optimizer.lr": 0.3, "train.local_epochs": 1, "checkpoint.every": 0}


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory) -> str:
    """One MLflow SQLite store for the module, its tables made once (that takes seconds)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).search_experiments()
    return uri


def write_sweep(directory: Path, mlflow_uri: str, name: str, **fields) -> Path:
    overrides = {**TINY, "checkpoint.dir": str(directory / "runs"), "data.partitions_dir": str(directory / "parts"),
                 "tracking.uri": mlflow_uri, **fields.pop("overrides", {})}
    body = {"base": str(DEFAULT), "overrides": overrides, "storage": f"sqlite:///{directory / 'optuna.db'}", **fields}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def mooring(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def load_study(path: Path, name: str):
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{path.parent / 'optuna.db'}")


# --------------------------------------------------------------------------------------- the small sweep
GOOD = {"train.optimizer.lr": 0.3, "data.partition.min_size": 5}
FATES = [GOOD, GOOD,
         {"train.optimizer.lr": 0.3, "data.partition.min_size": 1000},  # 5 × 1000 > the digits: PartitionError
         {"train.optimizer.lr": 1e-5, "data.partition.min_size": 5},  # learns nothing: below the median
         {"train.optimizer.lr": 1e6, "data.partition.min_size": 5}]  # NaN loss


@pytest.fixture(scope="module")
def small_sweep(ray_session, tmp_path_factory, mlflow_uri):
    directory = tmp_path_factory.mktemp("small")
    path = write_sweep(directory, mlflow_uri, "small",
                       params={"train.optimizer.lr": {"type": "categorical", "choices": [0.3, 1e-5, 1e6]},
                               "data.partition.min_size": {"type": "categorical", "choices": [5, 1000]}},
                       enqueue=FATES, n_trials=4, parallel=2, sampler={"name": "random", "seed": 0},
                       # one complete trial is enough to judge: trial 3 starts only after one of 0 and 1 is complete
                       pruner={"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0})
    rc, out, err = mooring("sweep", str(path))
    assert rc == 0, err
    return path, load_study(path, "small"), out, err


def test_sweep_runs_until_n_trials_are_complete_or_pruned(small_sweep):
    _, study, out, _ = small_sweep
    states = {t.number: t.state.name for t in study.trials}
    assert states == {0: "COMPLETE", 1: "COMPLETE", 2: "FAIL", 3: "PRUNED", 4: "PRUNED"}
    assert study.trials[0].value == study.trials[1].value  # the same parameters give the same run
    assert f"best trial 0: accuracy:final = {study.best_value:.6f}" in out
    assert "2 complete, 2 pruned, 1 failed" in out


def test_the_sweep_prints_where_its_report_is(small_sweep):
    path, _, out, _ = small_sweep
    sweep_dir = path.parent / "runs" / "sweeps" / "small"
    [saved] = [line for line in out.splitlines() if line.startswith("saved ")]
    assert saved.startswith(f"saved {sweep_dir}/report.html, ") and "trials.csv" in saved and "best_config.yaml" in saved
    assert all((sweep_dir / name).is_file() for name in saved.removeprefix(f"saved {sweep_dir}/").split(", "))


def test_a_trial_that_cannot_learn_is_pruned_after_its_first_round(small_sweep):
    _, study, _, err = small_sweep
    pruned, complete = study.trials[3], study.trials[0]
    assert list(pruned.intermediate_values) == [1]
    assert list(complete.intermediate_values) == [1, 2, 3]
    assert pruned.intermediate_values[1] < complete.intermediate_values[1]
    assert pruned.user_attrs["rounds"] == 1 and pruned.user_attrs["client_rounds"] == 5
    assert complete.user_attrs["client_rounds"] == 15
    assert "pruned after round 1" in pruned.user_attrs["pruned_reason"]
    assert re.search(r"trial 3 pruned +pruned after round 1", err)


def test_failures_are_recorded_with_their_reason_and_the_sweep_goes_on(small_sweep):
    _, study, _, err = small_sweep
    failed, diverged = study.trials[2], study.trials[4]
    assert failed.user_attrs["fail_reason"].startswith("PartitionError: data.partition.min_size = 1000")
    assert "diverged: train_loss = nan at round 1" == diverged.user_attrs["fail_reason"]
    assert "trial 2 failed" in err and "PartitionError" in err
    assert "trial 0 running" in err and "trial 0 complete" in err and "4/4 done" in err
    assert re.search(r"best \d+\.\d\d% \(trial [01]\)", err)


def test_mlflow_has_a_parent_run_with_one_nested_run_per_trial(small_sweep, mlflow_uri):
    from mlflow.tracking import MlflowClient

    path, study, _, _ = small_sweep
    client = MlflowClient(tracking_uri=mlflow_uri)
    parent_id = study.user_attrs["mlflow_parent_run_id"]
    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["optuna.study"] == "small"
    assert parent.data.metrics["best_value"] == pytest.approx(study.best_value)
    assert parent.data.tags["best.train.optimizer.lr"] == "0.3"
    artifacts = {a.path for a in client.list_artifacts(parent_id)}
    assert {"trials.csv", "optimization_history.png", "parallel_coordinate.png", "best_config.yaml",
            "report.html"} <= artifacts
    # the two complete trials have the same value: no importances to compute, and the sweep did not mind
    assert "param_importances.png" not in artifacts
    nested = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    by_number = {int(r.data.tags["optuna.trial_number"]): r for r in nested if "optuna.trial_number" in r.data.tags}
    assert [r.info.run_id for r in nested if "optuna.trial_number" not in r.data.tags] == [
        study.user_attrs["best_on_test"]["mlflow_run_id"]]  # and the best trial's config on the test set
    assert sorted(by_number) == [0, 1, 3, 4]  # trial 2 failed before its run started
    assert {n: r.data.tags["optuna.state"] for n, r in by_number.items()} == {
        0: "complete", 1: "complete", 3: "pruned", 4: "pruned"}
    assert by_number[3].info.status == "KILLED"
    assert by_number[0].data.params["train.optimizer.lr"] == "0.3"
    history = client.get_metric_history(by_number[0].info.run_id, "val_accuracy")
    assert [m.step for m in history] == [1, 2, 3]
    assert history[-1].value == pytest.approx(study.trials[0].value)


def test_no_trial_reads_the_test_set_and_the_best_trial_is_tested_once(small_sweep, mlflow_uri):
    """Read back from the study's SQLite storage and the MLflow store: every value a trial reported is its run's
    validation accuracy, and no trial's run has a test metric; the best trial's config, run once more on the
    test sets, trained exactly as the trial did."""
    from mlflow.tracking import MlflowClient

    path, study, out, _ = small_sweep
    client = MlflowClient(tracking_uri=mlflow_uri)
    ran = [t for t in study.trials if t.user_attrs.get("mlflow_run_id")]
    assert len(ran) == 4 and sum(bool(t.intermediate_values) for t in ran) == 3  # trial 4 diverged in round 1
    for trial in ran:
        run = client.get_run(trial.user_attrs["mlflow_run_id"])
        assert not {k for k in run.data.metrics if k.startswith(("accuracy", "personalized_", "final_global"))}
        validation = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "val_accuracy")}
        assert all(validation[step] == pytest.approx(value) for step, value in trial.intermediate_values.items())
        assert run.data.params["data.validation_fraction"] == "0.2" and run.data.params["eval.split"] == "validation"
    tested = study.user_attrs["best_on_test"]
    assert tested["trial"] == study.best_trial.number and tested["validation"] == study.best_value
    best_run = client.get_run(tested["mlflow_run_id"])
    assert best_run.data.metrics["accuracy"] == pytest.approx(tested["test"]) and "val_accuracy" not in best_run.data.metrics
    trained = [m.value for m in client.get_metric_history(study.best_trial.user_attrs["mlflow_run_id"], "train_loss")]
    assert [m.value for m in client.get_metric_history(tested["mlflow_run_id"], "train_loss")] == trained
    page = (path.parent / "runs" / "sweeps" / "small" / "report.html").read_text()
    assert f"<td>{study.best_value:.4f}</td><td>{tested['test']:.4f}</td>" in page
    assert out.count("on the test set: accuracy:final = ") == 1 and f"(validation {100 * study.best_value:.2f}%" in out


def test_the_report_lists_every_trial_with_its_fate_and_its_mlflow_run(small_sweep, mlflow_uri):
    from mlflow.tracking import MlflowClient

    path, study, _, _ = small_sweep
    page = (path.parent / "runs" / "sweeps" / "small" / "report.html").read_text()
    parent = MlflowClient(tracking_uri=mlflow_uri).get_run(study.user_attrs["mlflow_parent_run_id"])
    trials = re.findall(r"<tr><td>(\d+)</td><td>(\w+)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td><td>(.*?)</td></tr>",
                        page)
    assert [(int(n), state) for n, state, *_ in trials] == [(t.number, t.state.name.lower()) for t in study.trials]
    for (_, _, value, params, _, link), trial in zip(trials, study.trials):
        assert f"train.optimizer.lr={trial.params['train.optimizer.lr']:.4g}" in params
        assert value == ("–" if trial.value is None else f"{trial.value:.4f}")
        run_id = trial.user_attrs.get("mlflow_run_id")
        assert (run_id is None) == (link == "–")  # trial 2 failed before its run started
        if run_id is not None:
            assert f"#/experiments/{parent.info.experiment_id}/runs/{run_id}" in link
    assert "PartitionError" in trials[2][4] and trials[3][4].startswith("pruned after round")
    assert page.count('src="data:image/png;base64,') == 2  # the optimisation history and the parallel coordinates


def test_best_writes_a_config_that_mooring_run_accepts(small_sweep, tmp_path):
    path, study, _, _ = small_sweep
    out_path = tmp_path / "best.yaml"
    rc, out, err = mooring("sweep", str(path), "--best", "--out", str(out_path))
    assert rc == 0, err
    assert out.startswith(f"best trial 0: accuracy:final = {study.best_value:.6f}")
    assert "best trial 0 on the test set: accuracy:final = " in out  # recorded by the sweep, not measured again
    cfg = load_config(out_path)
    assert cfg.eval.split == "test" and cfg.data.validation_fraction == 0.2  # trains as the trial did
    assert cfg.train.optimizer.lr == 0.3 and cfg.data.partition.min_size == 5 and cfg.name == "small-best"
    rc, out, err = mooring("run", str(out_path), "--set", "train.rounds=1", "--quiet")
    assert rc == 0, err
    assert "1 rounds" in out


# ------------------------------------------------------------------------------------- kill and resume
def test_a_killed_sweep_resumes_without_losing_finished_trials(ray_session, tmp_path, mlflow_uri):
    from optuna.storages import RDBStorage

    path = write_sweep(tmp_path, mlflow_uri, "resumed",
                       params={"train.optimizer.lr": {"type": "categorical", "choices": [0.1, 0.2, 0.3]}},
                       enqueue=[{"train.optimizer.lr": lr} for lr in (0.3, 0.1, 0.2)],
                       n_trials=3, parallel=2, pruner={"name": "none"}, sampler={"name": "random", "seed": 0})
    address = ray_session.get_runtime_context().gcs_address
    storage = RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}", engine_kwargs={"connect_args": {"timeout": 60}})
    with open(tmp_path / "driver.log", "w") as log:
        driver = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "sweep", str(path), "--address", address],
                                  cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            before = wait_for(storage, "resumed", lambda s: "COMPLETE" in s and "RUNNING" in s, driver,
                              tmp_path / "driver.log")
        finally:
            os.kill(driver.pid, signal.SIGKILL)
            driver.wait()
    study = load_study(path, "resumed")
    finished = {t.number: t.value for t in study.trials if t.state.name == "COMPLETE"}
    stale = {t.number: t.params for t in study.trials if t.state.name == "RUNNING"}
    assert finished and stale, before
    parent_id = study.user_attrs["mlflow_parent_run_id"]

    rc, out, err = mooring("sweep", str(path))
    assert rc == 0, err
    assert "resuming:" in err
    study = load_study(path, "resumed")
    by_number = {t.number: t for t in study.trials}
    assert {n: by_number[n].value for n in finished} == finished  # nothing finished was lost or rerun
    retries = {t.user_attrs["retry_of"]: t for t in study.trials if "retry_of" in t.user_attrs}
    for number, params in stale.items():
        assert by_number[number].state.name == "FAIL"
        assert "left RUNNING: its driver" in by_number[number].user_attrs["fail_reason"]
        assert retries[number].params == params and retries[number].state.name == "COMPLETE"
    assert sum(t.state.name in ("COMPLETE", "PRUNED") for t in study.trials) == 3
    assert study.user_attrs["mlflow_parent_run_id"] == parent_id  # the same parent run, reused

    from mlflow.tracking import MlflowClient

    artifacts = {a.path for a in MlflowClient(tracking_uri=mlflow_uri).list_artifacts(parent_id)}
    assert "param_importances.png" in artifacts  # three learning rates, three different values


@pytest.mark.parametrize("other, retried", [("local, dead", True), ("local, alive", False),
                                              ("remote, beating", False), ("remote, silent", True)])
def test_a_trial_left_with_no_driver_named_is_retried_at_once_only_when_no_other_driver_lives(
        tmp_path, mlflow_uri, other, retried):
    """A driver asks for a trial, then writes its id on it: one killed in between leaves a RUNNING trial with no
    name. The next driver retries it at once when every other driver of the study is gone (a dead process on
    this host, or another host silent past the grace), and waits out the grace while one may be running it."""
    import socket

    from pipelines.sweep_driver import DRIVER_GRACE_SECONDS, Driver
    from pipelines.sweep_file import load_sweep
    from pipelines.sweep_optuna import distributions, open_storage, open_study
    from pipelines.trial_store import TrialStore

    sweep = load_sweep(write_sweep(tmp_path, mlflow_uri, "unnamed", n_trials=2, pruner={"name": "none"},
                                   params={"train.optimizer.lr": {"type": "float", "low": 0.1, "high": 0.3}}))
    storage = open_storage(sweep.storage_url)
    study, _ = open_study(sweep, storage)
    unnamed = study.ask(distributions(sweep))
    ended = subprocess.Popen(["true"])
    ended.wait()
    with subprocess.Popen(["sleep", "60"]) as running:
        host, now = socket.gethostname(), time.time()
        other_id, beat = {"local, dead": (f"{host}:{ended.pid}:a", now), "local, alive": (f"{host}:{running.pid}:b", now),
                          "remote, beating": ("elsewhere:1:c", now),
                          "remote, silent": ("elsewhere:1:d", now - DRIVER_GRACE_SECONDS - 5)}[other]
        study.set_user_attr(f"driver:{other_id}", beat)
        driver = Driver(sweep, study, TrialStore(storage, sweep.study_name), None, 1, echo=lambda line: None)
        driver.heartbeat(force=True)
        driver.recover_stale()
        running.kill()
    trials = study.get_trials()
    assert trials[0].state.name == ("FAIL" if retried else "RUNNING")
    if retried:
        assert trials[0].user_attrs["fail_reason"] == ("trial left RUNNING: its driver was gone before it recorded "
                                                       "itself (no other driver of the study lives); failed and "
                                                       "enqueued again")
        assert [(t.state.name, t.user_attrs) for t in trials[1:]] == [("WAITING", {"retry_of": 0})]
        again = study.ask(distributions(sweep))
        assert (again.number, again.params) == (1, unnamed.params)
    else:
        assert len(trials) == 1 and "fail_reason" not in trials[0].user_attrs


def wait_for(storage, study: str, condition, driver: subprocess.Popen, log: Path, timeout: float = 420.0) -> list[str]:
    """Poll the study's storage until its trial states satisfy `condition`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert driver.poll() is None, f"the sweep driver exited early:\n{log.read_text()[-3000:]}"
        try:
            study_id = storage.get_study_id_from_name(study)
            states = [t.state.name for t in storage.get_all_trials(study_id)]
        except KeyError:  # the study is not created yet
            states = []
        if condition(states):
            return states
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for the sweep; log:\n{log.read_text()[-3000:]}")


def test_sigterm_stops_a_sweep_like_ctrl_c_saying_what_was_kept_and_a_rerun_resumes(ray_session, tmp_path,
                                                                                      mlflow_uri):
    """SIGTERM after the first trial: exit 143 with one line (the finished trial kept, the running one enqueued
    again, how to resume), no abort and no stack dump (Ray's own handler, before, exited mid-wait: SIGABRT)."""
    from optuna.storages import RDBStorage

    path = write_sweep(tmp_path, mlflow_uri, "termed",
                       params={"train.optimizer.lr": {"type": "categorical", "choices": [0.1, 0.2, 0.3]}},
                       enqueue=[{"train.optimizer.lr": lr} for lr in (0.3, 0.2, 0.1)],
                       n_trials=3, parallel=1, pruner={"name": "none"}, sampler={"name": "random", "seed": 0})
    address = ray_session.get_runtime_context().gcs_address
    storage = RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}", engine_kwargs={"connect_args": {"timeout": 60}})
    log = tmp_path / "driver.log"
    with open(log, "w") as out:
        driver = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "sweep", str(path), "--address", address],
                                  cwd=ROOT, stdout=subprocess.DEVNULL, stderr=out)
        try:
            wait_for(storage, "termed", lambda s: "COMPLETE" in s, driver, log)
            driver.send_signal(signal.SIGTERM)
            rc = driver.wait(timeout=120)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
    err = log.read_text()
    assert rc == 143, err[-3000:]
    last = err.strip().splitlines()[-1]
    kept = {t.number: t.value for t in load_study(path, "termed").trials if t.state.name == "COMPLETE"}
    # the signal lands after the first trial; a short trial may finish a second one before the driver looks
    assert len(kept) in (1, 2), kept
    assert re.fullmatch(rf"interrupted: sweep termed stopped: {len(kept)} complete and 0 pruned trials kept in "
                        r"sqlite:///\S+(; 1 running trial was failed and enqueued again)?; run the same command to "
                        r"resume", last), last
    for sign in ("Aborted", "SIGABRT", "Traceback", "*** ", "Stack trace"):
        assert sign not in err, err[-3000:]

    rc, _, err = mooring("sweep", str(path))
    assert rc == 0, err
    assert f"resuming: {len(kept)} complete" in err
    study = load_study(path, "termed")
    assert kept == {t.number: t.value for t in study.trials if t.number in kept}
    assert sum(t.state.name == "COMPLETE" for t in study.trials) == 3


# ----------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("change, message", [
    ({"n_trial": 3}, "unknown key 'n_trial'"),
    ({"params": {"train.optimizer.lr": {"type": "float", "low": 0.5, "high": 0.1}}}, "low = 0.5 must be below high = 0.1"),
    ({"params": {"train.optimizer.lr": {"type": "float", "low": 0.0, "high": 0.1, "log": True}}}, "log scale needs low > 0"),
    ({"params": {"train.optimizer.lr": {"type": "float", "low": 0.01, "high": 0.1, "grid": [0.5]}}}, "outside"),
    ({"params": {"train.optimizer.lr": {"type": "uniform", "low": 0.01, "high": 0.1}}}, "params.train.optimizer.lr"),
    ({"params": {"train.optimzer.lr": {"type": "float", "low": 0.01, "high": 0.1}}}, "unknown key 'train.optimzer'"),
    ({"params": {"train.optimizer.lr": {"type": "float", "low": -1.0, "high": 0.1}}}, "train.optimizer.lr = -1.0"),
    ({"params": {"algorithm.fedprox.mu": {"type": "float", "low": 0.01, "high": 0.1}}}, "set `algorithm: fedprox`"),
    ({"params": {}}, "nothing to search"),
    ({"algorithm": "feddebias", "params": {"train.engine": {"type": "categorical", "choices": ["sequential", "vectorized"]}}},
     "params.train.engine = vectorized: train.engine: vectorized cannot train feddebias"),
    ({"algorithm": "fedprox", "enqueue": [{"train.optimizer.lr": 0.1}]}, "enqueue[0]: train.optimizer.lr not searched"),
    ({"algorithm": "no_such_method"}, "unknown algorithm"),
    ({"algorithm": "fedprox", "pruner": {"name": "median", "warmup": 2}}, "unknown key 'pruner.median.warmup'"),
    ({"algorithm": "fedprox", "storage": "postgresql+psycopg2://postgres@127.0.0.1:1/none"}, "cannot open the Optuna storage"),
    ({"algorithm": "fedprox", "storage": "sqlite:///{tmp}/a_file/optuna.db"}, "cannot open the Optuna storage"),
    ({"algorithm": "fedprox", "study": "my study"}, "study: 'my study' would name the trials' runs 'my study-t0000'"),
    # 10¹⁸ points: counted, not made (Optuna's grid sampler lists every point: it grew past 23 GB)
    ({"sampler": {"name": "grid"}, "params": {k: {"type": "int", "low": 1, "high": 10**6} for k in
                                              ("seed", "train.rounds", "train.local_epochs")}},
     "1,000,000 (seed) × 1,000,000 (train.local_epochs) × 1,000,000 (train.rounds) = "
     "1,000,000,000,000,000,000 points, over the limit of 10,000"),
    ({"sampler": {"name": "grid", "points": 10**9}, "params": {"train.optimizer.lr": {"type": "float", "low": 0.01,
                                                                                      "high": 0.1}}},
     "over the limit of 10,000"),
])
def test_bad_sweep_files_fail_in_one_line_with_exit_2(tmp_path, change, message):
    body = {"base": str(DEFAULT), "overrides": {"checkpoint.dir": str(tmp_path / "runs")},
            "storage": f"sqlite:///{tmp_path / 'optuna.db'}", **change}
    if "{tmp}" in body["storage"]:  # a directory that is a regular file: unopenable even for root
        (tmp_path / "a_file").write_text("")
        body["storage"] = body["storage"].format(tmp=tmp_path)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(body))
    rc, out, err = mooring("sweep", str(path), "--address", "127.0.0.1:1")  # never reached: no Ray is needed
    assert rc == 2, err
    assert message in err and err.count("\n") == 1 and err.startswith("error: ")


def test_a_study_name_no_trial_can_use_is_refused_before_any_trial(tmp_path):
    """A file name with a space (the study's default name) or --study with one would make every trial's run name
    invalid: one line, exit 2, before Ray (before, every trial failed as fast as it started, without end)."""
    path = write_sweep(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}", "my sweep", algorithm="fedprox")
    rc, _, err = mooring("sweep", str(path), "--address", "127.0.0.1:1")
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {path}: the file's name (set `study:` in it or --study NAME): 'my sweep' would")
    rc, _, err = mooring("sweep", str(path), "--study", "my study", "--address", "127.0.0.1:1")
    assert rc == 2 and err.startswith("error: --study: 'my study' would name the trials' runs"), err
    assert not (tmp_path / "optuna.db").exists()


def test_a_study_made_by_another_sweep_is_refused_rather_than_resumed(tmp_path):
    """A study resumed by a sweep whose base config, --set or ranges changed would mix two searches in one
    (before, it was resumed silently): one line, exit 2, before Ray; the same sweep resumes it."""
    from pipelines.sweep_file import load_sweep
    from pipelines.sweep_optuna import open_storage, open_study

    path = write_sweep(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}", "s", algorithm="fedprox")
    sweep = load_sweep(path)
    study, created = open_study(sweep, open_storage(sweep.storage_url))
    assert created and study.user_attrs["mooring:sweep"] == sweep.fingerprint
    assert open_study(load_sweep(path, n_trials=50, parallel=3), open_storage(sweep.storage_url))[1] is False
    rc, _, err = mooring("sweep", str(path), "--set", "seed=12345", "--address", "127.0.0.1:1")
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("error: --study s: that study's trials ran another sweep (its base config, --set"), err
    assert load_sweep(path, overrides=["seed=12345"]).fingerprint != sweep.fingerprint


@pytest.mark.timeout(120)
def test_trials_whose_configs_are_refused_count_as_failures_and_end_the_sweep(ray_session, tmp_path, mlflow_uri):
    """Every combination refused (3 clients, 4 per round; each value valid alone): max_failures trials fail (by
    default n_trials, at most 10), then one line and exit 1; before, the driver asked for such trials for ever."""
    path = write_sweep(tmp_path, mlflow_uri, "refused",
                       params={"data.num_clients": {"type": "categorical", "choices": [3]},
                               "train.clients_per_round": {"type": "categorical", "choices": [4]}},
                       n_trials=20, sampler={"name": "random", "seed": 0})
    why = "train.clients_per_round = 4: more clients per round than data.num_clients = 3"
    rc, _, err = mooring("sweep", str(path))
    assert rc == 1, err
    assert err.strip().splitlines()[-1].startswith(
        f"error: sweep refused: stopped after 10 failed trials (max_failures = 10), the last with {why}"), err
    rc, _, err = mooring("sweep", str(path), "--max-failures", "2")  # resumed, with another limit
    assert rc == 1 and "stopped after 2 failed trials (max_failures = 2)" in err.strip().splitlines()[-1], err
    assert [t.state.name for t in load_study(path, "refused").trials] == ["FAIL"] * 12


def test_storage_passwords_are_never_shown():
    from pipelines.sweep_file import redacted

    assert redacted("postgresql+psycopg2://me:s3cret@db:5432/optuna") == "postgresql+psycopg2://me:***@db:5432/optuna"


def test_best_of_a_study_that_does_not_exist_is_one_line(tmp_path):
    path = write_sweep(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}", "never_run", algorithm="fedprox")
    rc, _, err = mooring("sweep", str(path), "--best")
    assert rc == 1 and err == f"error: no study 'never_run' in sqlite:///{tmp_path / 'optuna.db'}; run the sweep first\n"


# ------------------------------------------------------------------------------------ the sweep files
SWEEPS = sorted((ROOT / "configs" / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_shipped_sweep_files_load(path):
    from pipelines.sweep_file import load_sweep
    from tasks.algorithms import ALGORITHMS

    named = yaml.safe_load(path.read_text()).get("algorithm")
    sweep = load_sweep(path)
    assert sweep.study_name == path.stem and sweep.storage_url == f"sqlite:///{Path('optuna.db').absolute()}"
    assert sweep.space and all(p.split(".")[0] in ("algorithm", "data", "train", "privacy") for p in sweep.space)
    if named is not None:
        searchable = ALGORITHMS.get(named).Params.search_space()
        assert {f"algorithm.{named}.{f}" for f in searchable} <= set(sweep.space)


def test_algorithm_shortcut_searches_its_default_ranges_and_grids_are_counted(tmp_path):
    from pipelines.sweep_file import load_sweep

    path = write_sweep(tmp_path, "sqlite:///unused.db", "grid", algorithm="fedprox",
                       params={"data.partition.alpha": {"type": "categorical", "choices": [0.1, 1.0]}},
                       sampler={"name": "grid", "points": 3})
    sweep = load_sweep(path)
    mu = sweep.space["algorithm.fedprox.mu"]
    assert (mu.type, mu.low, mu.high, mu.log) == ("float", 1e-4, 1.0, True)
    assert mu.grid_values(3) == [1e-4, 0.01, 1.0]
    assert sweep.base.algorithm.name == "fedprox" and sweep.n_trials == 3 * 2
    assert load_sweep(path, n_trials=2, study="other").n_trials == 2
    assert sweep.base.train.rounds == 3 and load_sweep(path, overrides=["train.rounds=7"]).base.train.rounds == 7


# (last in the module: it adds a trial to the small sweep's study)
def test_each_call_updates_the_parent_runs_trial_counts(small_sweep, mlflow_uri):
    from mlflow.tracking import MlflowClient

    path, study, _, _ = small_sweep
    # the fifth trial one that trains: a drawn one fails half the time (min_size 1000), and a resuming driver's seed
    # comes from its pid, so five failures in a row (which end the sweep) came in about one call of 32
    study.enqueue_trial(GOOD)
    rc, _, err = mooring("sweep", str(path), "--n-trials", "5")
    assert rc == 0, err
    client = MlflowClient(tracking_uri=mlflow_uri)
    parent = client.get_run(study.user_attrs["mlflow_parent_run_id"])
    assert parent.data.params["n_trials"] == "4"  # the first call's, as MLflow keeps params
    assert parent.data.tags["n_trials"] == "5" and parent.data.metrics["n_trials"] == 5
    assert {m.value for m in client.get_metric_history(parent.info.run_id, "n_trials")} == {4, 5}
    done = parent.data.metrics["trials_complete"] + parent.data.metrics["trials_pruned"]
    assert done == sum(t.state.name in ("COMPLETE", "PRUNED") for t in study.trials) == 5
