"""Shared fixtures: one local Ray instance for the whole session (it takes 10–15 s to start on 2 cores; under
`make test`'s pytest-xdist workers, one for each worker), and a fresh MLflow store and run directory per test."""
from __future__ import annotations

import os
import socket

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# One intra-op thread in the test process and every process it starts (Ray workers, subprocess runs): on a
# 2-core machine where Ray's actors train beside it, PyTorch's default (a thread per core) oversubscribes the
# cores and its spinning threads slow every test several-fold.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(config, items):
    """`gpu` tests skip, saying why, where torch sees no CUDA GPU (CI never has one)."""
    gpu_tests = [item for item in items if "gpu" in item.keywords]
    if not gpu_tests:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is False on this machine")
    for item in gpu_tests:
        item.add_marker(skip)


def keep_hypothesis_out_of_the_working_tree() -> None:
    """No example database, and Hypothesis's other files (.hypothesis/) in a temporary directory."""
    import tempfile

    from hypothesis import settings
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(tempfile.mkdtemp(prefix="mooring-hypothesis-"))
    settings.register_profile("mooring", database=None)
    settings.load_profile("mooring")


keep_hypothesis_out_of_the_working_tree()

# what a run writes where it starts when its config says nowhere else (MLflow's ./mlruns, partitions, runs)
RUN_OUTPUTS = ("mlruns", "mlartifacts", "mlflow.db", ".mooring", "runs", "results")


def written_outputs(root) -> set[str]:
    from pathlib import Path

    return {str(p) for name in RUN_OUTPUTS for p in [Path(root, name), *Path(root, name).rglob("*")] if p.exists()}


@pytest.fixture(scope="session", autouse=True)
def nothing_written_into_the_working_tree(request):
    """Tests write nothing into the working tree: a run output that appears there during the session fails it."""
    root = request.config.rootpath
    before = written_outputs(root)
    yield
    new = sorted(written_outputs(root) - before)
    assert not new, f"the tests wrote into the working tree: {new[:5]}"


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from orchestrator.ray_runtime.ray_start import init_ray

    if not ray.is_initialized():
        init_ray(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


# the comparison `finished_comparison` runs: two methods (one without a global model), two seeds
COMPARED = {"fedprox": {"algorithm.name": "fedprox"}, "local": {"algorithm.name": "local"}}


@pytest.fixture(scope="session")
def finished_comparison(ray_session, tmp_path_factory, mlflow_store_made):
    """One small finished `compare` (COMPARED × seeds 0 and 1), shared by the tests that read what it leaves:
    (base config, Comparison, output directory)."""
    import shutil

    from orchestrator.experiment.config import load_config
    from pipelines.compare import compare

    tmp = tmp_path_factory.mktemp("comparison")
    shutil.copyfile(mlflow_store_made, tmp / "mlflow.db")
    base = load_config("configs/default.yaml", [f"checkpoint.dir={tmp / 'runs'}", f"data.partitions_dir={tmp / 'p'}",
                                                f"tracking.uri=sqlite:///{tmp / 'mlflow.db'}", "train.rounds=3",
                                                "data.num_clients=6", "resources.num_actors=1"])
    comp = compare(base, COMPARED, [0, 1], tmp / "out", echo=lambda s: None, progress=False)
    return base, comp, tmp / "out"


@pytest.fixture(scope="session")
def mooring_run_on_its_own_ray(tmp_path_factory):
    """One `mooring run` that starts a local Ray instance of its own, and what it left behind
    (tests/own_ray_run.py), for tests/test_startup.py and tests/test_failures.py."""
    from tests.own_ray_run import run_with_its_own_ray

    return run_with_its_own_ray(tmp_path_factory.mktemp("own-ray"))


@pytest.fixture(scope="session")
def mlflow_store_made(tmp_path_factory):
    """A new MLflow SQLite store, its tables made (MLflow's migrations: a second or two of CPU each time a run opens
    a new store), for `workdir` to copy: each test still gets a store of its own. The first use of a new store,
    several processes racing to make its tables, is tests/test_concurrent_first_use.py's."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-made") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def workdir(tmp_path, mlflow_store_made):
    """Overrides that keep a test's runs, partitions and MLflow store inside its tmp_path (the store a copy of
    `mlflow_store_made`)."""
    import shutil

    shutil.copyfile(mlflow_store_made, tmp_path / "mlflow.db")
    return [
        f"checkpoint.dir={tmp_path / 'runs'}",
        f"data.partitions_dir={tmp_path / 'partitions'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ]


def postgres_reachable(host: str = "127.0.0.1", port: int = 5432) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


requires_postgres = pytest.mark.skipif(not postgres_reachable(), reason="PostgreSQL is not reachable at 127.0.0.1:5432")


PG_SERVER = "postgresql+psycopg2://postgres@127.0.0.1:5432"


@pytest.fixture
def new_postgres_databases():
    """make(n) → n URLs of new, empty databases on the local server, dropped after the test: a database a
    test creates itself, so that first use (schema creation) happens in the test every time."""
    import uuid

    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="test")
    conn.autocommit = True
    names: list[str] = []

    def make(n: int) -> list[str]:
        new = [f"mooring_test_{uuid.uuid4().hex[:12]}" for _ in range(n)]
        with conn.cursor() as cur:
            for name in new:
                cur.execute(f"CREATE DATABASE {name}")
                names.append(name)
        return [f"{PG_SERVER}/{name}" for name in new]

    yield make
    with conn.cursor() as cur:
        for name in names:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    conn.close()
