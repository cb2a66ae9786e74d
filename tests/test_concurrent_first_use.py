"""Several Mooring processes opening the same new MLflow store or Optuna storage at the same moment: every
one of them works, and the store is intact afterwards (orchestrator/io/schema_lock.py).

Each repetition uses a new database (a new SQLite file; on PostgreSQL a database created for it and dropped
after), so the first-use race happens every time. The processes are forked from one helper interpreter that
has imported MLflow and Optuna once, and released together by a barrier. MOORING_RACE_REPEATS sets the
repetitions (the issue's acceptance check is 20 in a row: MOORING_RACE_REPEATS=20)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import requires_postgres

PROCESSES = 4
REPEATS = int(os.environ.get("MOORING_RACE_REPEATS", "2"))

# Run in a fresh interpreter: argv = kind, then one URL per repetition. Prints one JSON line per repetition:
# {"failures": [one line per process that failed], "intact": what the store answers afterwards}.
RACE = r"""
import json, multiprocessing as mp, os, sys, traceback
kind, urls = sys.argv[1], sys.argv[2:]
from mlflow.tracking import MlflowClient
import optuna
from orchestrator.reporting.tracking import Tracker
from pipelines.sweep_optuna import open_storage
optuna.logging.set_verbosity(optuna.logging.ERROR)

def open_store(url):
    if kind == "mlflow":
        tracker = Tracker(url, "race")
        run_id = tracker.start("r", {}, {})
        if not tracker.enabled or run_id is None:
            raise RuntimeError("tracking was switched off (the store did not open)")
        tracker.end()
    else:
        optuna.create_study(study_name="race", storage=open_storage(url), load_if_exists=True,
                            direction="maximize").ask()

def child(url, barrier, errors):
    barrier.wait()
    try:
        open_store(url)
    except BaseException as e:
        errors.put(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

def intact(url):
    if kind == "mlflow":
        client = MlflowClient(url)
        exp = client.get_experiment_by_name("race")
        return len(client.search_runs([exp.experiment_id]))
    return len(optuna.load_study(study_name="race", storage=url).trials)

ctx = mp.get_context("fork")
for url in urls:
    barrier, errors = ctx.Barrier(int(os.environ["RACE_PROCESSES"])), ctx.Queue()
    procs = [ctx.Process(target=child, args=(url, barrier, errors)) for _ in range(barrier.parties)]
    for p in procs: p.start()
    for p in procs: p.join(300)
    failures = [f"exit code {p.exitcode}" for p in procs if p.exitcode != 0]
    while not errors.empty(): failures.append(errors.get())
    try:
        state = intact(url)
    except Exception as e:
        state = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    print(json.dumps({"failures": failures, "intact": state}), flush=True)
"""


def race(kind: str, urls: list[str]) -> list[dict]:
    env = {**os.environ, "RACE_PROCESSES": str(PROCESSES), "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", RACE, kind, *urls], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def assert_every_process_worked(results: list[dict], repeats: int) -> None:
    assert len(results) == repeats
    for i, result in enumerate(results):
        assert result["failures"] == [], f"repetition {i + 1}: {result['failures']}"
        # every process's run (MLflow) or trial (Optuna) is in the store, read back after the race
        assert result["intact"] == PROCESSES, f"repetition {i + 1}: store answers {result['intact']!r}"


@pytest.mark.parametrize("kind", ["mlflow", "optuna"])
def test_new_sqlite_store_opened_by_several_processes_at_once(kind, tmp_path):
    urls = [f"sqlite:///{tmp_path / f'{kind}-{i}.db'}" for i in range(REPEATS)]
    assert_every_process_worked(race(kind, urls), REPEATS)


@pytest.mark.postgres
@requires_postgres
@pytest.mark.parametrize("kind", ["mlflow", "optuna"])
def test_new_postgres_store_opened_by_several_processes_at_once(kind, new_postgres_databases):
    assert_every_process_worked(race(kind, new_postgres_databases(REPEATS)), REPEATS)
