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

