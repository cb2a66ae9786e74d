"""Shared fixtures: one local Ray instance for the whole session (it takes 10–15 s to start on 2 cores),
and a fresh MLflow store and run directory per test."""
from __future__ import annotations

import os
import socket

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from orchestrator.run import init_ray

    if not ray.is_initialized():
        init_ray(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def workdir(tmp_path):
    """Overrides that keep a test's runs, partitions and MLflow store inside its tmp_path."""
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
