"""Two `mooring sweep` drivers sharing one Optuna study on PostgreSQL, their trials on the shared Ray instance.

The two start together on a new database and a new MLflow store, so both also race to create the schemas.
Between them they run exactly n_trials trials: none lost, none run twice, each driver runs some, and both end
up reporting the same best trial, which `--best` reports too.
"""
from __future__ import annotations

import re
import subprocess
import sys
import uuid

import pytest
import yaml

from tests.conftest import requires_postgres
from tests.test_sweep import DEFAULT, ROOT, TINY, mooring

pytestmark = [requires_postgres, pytest.mark.postgres]
BEST = re.compile(r"^best trial (\d+): accuracy:final = ([0-9.]+)", re.MULTILINE)


def test_two_drivers_share_one_study_on_postgres(ray_session, tmp_path, new_postgres_databases):
    import optuna
    from mlflow.tracking import MlflowClient

    mlflow_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    [storage] = new_postgres_databases(1)
    study_name = f"shared-{uuid.uuid4().hex[:10]}"
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump({
        "base": str(DEFAULT),
        "overrides": {**TINY, "checkpoint.dir": str(tmp_path / "runs"), "data.partitions_dir": str(tmp_path / "parts"),
                      "tracking.uri": mlflow_uri},
        "params": {"train.optimizer.lr": {"type": "float", "low": 0.05, "high": 0.5, "log": True}},
        "n_trials": 4, "parallel": 1, "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"},
        "study": study_name, "storage": storage}))
    address = ray_session.get_runtime_context().gcs_address
    command = [sys.executable, "-m", "orchestrator.cli", "sweep", str(path), "--address", address]
    drivers = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outputs = [d.communicate(timeout=500) for d in drivers]
    for d, (_, err) in zip(drivers, outputs):
        assert d.returncode == 0, err[-3000:]

    study = optuna.load_study(study_name=study_name, storage=storage)
    finished = [t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(finished) == 4
    assert not [t for t in study.trials if t.state.name in ("FAIL", "RUNNING")]  # none lost
    run_ids = [t.user_attrs["mlflow_run_id"] for t in finished]
    assert len(set(run_ids)) == 4  # each trial ran once, in its own run
    parent_id = study.user_attrs["mlflow_parent_run_id"]
    client = MlflowClient(tracking_uri=mlflow_uri)
    nested = client.search_runs([client.get_run(parent_id).info.experiment_id],
                                f"tags.mlflow.parentRunId = '{parent_id}'")
    # no trial ran twice, and besides the trials only the best trial's one run on the test sets, by one driver
    tested = study.user_attrs["best_on_test"]
    assert tested["trial"] == study.best_trial.number
    assert sorted(r.info.run_id for r in nested) == sorted([*run_ids, tested["mlflow_run_id"]])
    assert {t.user_attrs["driver"] for t in finished} == set(_drivers(study))  # both drivers ran trials
    assert len(_drivers(study)) == 2

    best = study.best_trial
    for out, _ in outputs:
        number, value = BEST.search(out).groups()
        assert (int(number), value) == (best.number, f"{best.value:.6f}")
        assert f"MLflow parent run {parent_id}" in out
    rc, out, err = mooring("sweep", str(path), "--best", "--out", str(tmp_path / "best.yaml"))
    assert rc == 0, err
    assert BEST.search(out).groups() == (str(best.number), f"{best.value:.6f}")


def _drivers(study) -> list[str]:
    """The drivers that recorded a heartbeat in the study."""
    return [key.removeprefix("driver:") for key in study.user_attrs if key.startswith("driver:")]



def _claim_in_process(url: str, study_name: str, start, results) -> None:
    import optuna

    from pipelines.best_on_test import claimed_by_this_driver
    from pipelines.sweep_optuna import open_storage

    storage = open_storage(url)
    study = optuna.load_study(study_name=study_name, storage=storage)
    start.wait()
    results.put(claimed_by_this_driver(storage, study, 3))


def test_of_drivers_claiming_together_exactly_one_measures(tmp_path, new_postgres_databases):
    """Six processes claim the best trial's test run at the same moment: one claim stands. A claim whose driver
    died on this host is taken over; one from another host stands until released."""
    import multiprocessing

    import optuna

    from pipelines.best_on_test import CLAIM_OWNER_ATTR, claim_name, claimed_by_this_driver, release_claim
    from pipelines.sweep_optuna import open_storage

    [url] = new_postgres_databases(1)
    storage = open_storage(url)
    study = optuna.create_study(study_name="s", storage=storage)
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    workers = [context.Process(target=_claim_in_process, args=(url, "s", start, results)) for _ in range(6)]
    for w in workers:
        w.start()
    start.set()
    won = [results.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(timeout=60)
    assert won.count(True) == 1, won

    name = claim_name(study, 3)  # the winner's process has exited: its claim is stale and taken over
    assert claimed_by_this_driver(storage, study, 3)
    assert claimed_by_this_driver(storage, study, 3) is False  # this (living) process holds it now
    claim_id = storage.get_study_id_from_name(name)
    storage.set_study_user_attr(claim_id, CLAIM_OWNER_ATTR, {"host": "another-host", "pid": 1})
    assert claimed_by_this_driver(storage, study, 3) is False
    release_claim(storage, name)
    assert claimed_by_this_driver(storage, study, 3)
