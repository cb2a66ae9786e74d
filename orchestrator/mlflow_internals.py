"""The one module that reaches into MLflow beyond its documented client API: the pieces of `mlflow server` that
`mooring ui` runs in its own process (the server's environment variables, its store set-up and its FastAPI app),
and where MLflow keeps its built UI. pyproject.toml bounds MLflow to the versions these were tried on; where a
piece is missing, the UI's every API request answers with what failed to load (orchestrator/commands/ui.py); no
run depends on this module."""
from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path


def server_environment(uri: str, artifact_root: str) -> dict[str, str]:
    """What `mlflow server` hands its uvicorn worker (mlflow/server/__init__.py, _run_server), for a
    browse-only server on `uri`: the store, artifacts read from where the runs put them, no job runner.
    MLflow's two private variables are named here, not imported: under an MLflow that renamed them they are
    ignored, and its defaults do the same (no job executor; the server name only picks the flavour of the
    auth app, which this server does not run)."""
    from mlflow.server.constants import ARTIFACT_ROOT_ENV_VAR, BACKEND_STORE_URI_ENV_VAR

    return {BACKEND_STORE_URI_ENV_VAR: uri, ARTIFACT_ROOT_ENV_VAR: artifact_root, "_MLFLOW_SGI_NAME": "uvicorn",
            "_MLFLOW_IN_JOB_EXECUTOR": "false", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def load_mlflow_app(uri: str):
    """MLflow's FastAPI app on the store `uri`, set up as `mlflow server --no-serve-artifacts` would."""
    from mlflow.server.handlers import initialize_backend_stores
    from mlflow.utils.server_cli_utils import resolve_default_artifact_root

    artifact_root = resolve_default_artifact_root(False, None, uri)
    os.environ.update(server_environment(uri, artifact_root))
    initialize_backend_stores(uri, uri, artifact_root)  # creates or upgrades the store's tables, as mlflow server
    from mlflow.server.fastapi_app import app

    print(f"browsing the runs in {uri}", flush=True)
    return app


def mlflow_static_dir() -> Path:
    """MLflow's built UI, found without importing MLflow."""
    return Path(find_spec("mlflow").submodule_search_locations[0]) / "server" / "js" / "build"
