"""`mooring ui`: MLflow's web UI on the store that runs log to, for browsing on this machine.

It serves MLflow's tracking UI and REST API (experiments, runs, metrics, artifacts) from the store, and
nothing else, in this one process: MLflow's app under uvicorn, as `mlflow server --workers 1` would run it,
but without that command's launcher process and without its job runner (the huey consumers that run GenAI
evaluation jobs and trace roll-ups, never used by browsing). SIGINT (Ctrl-C) or SIGTERM stops it; nothing is
left behind because nothing else is started.
"""
from __future__ import annotations

import os
import warnings


def configure(parser) -> None:
    parser.add_argument("--uri", default=None, metavar="URI",
                        help="tracking store to browse (default: MLFLOW_TRACKING_URI, else MLflow's default store "
                             "in this directory: where runs log when their config sets no tracking.uri)")
    parser.add_argument("--port", type=int, default=5000, help="port to serve on (default: 5000)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1, this machine only; MLflow answers other host "
                             "names only if MLFLOW_SERVER_ALLOWED_HOSTS lists them)")


def server_environment(uri: str, artifact_root: str) -> dict[str, str]:
    """What `mlflow server` hands its uvicorn worker (mlflow/server/__init__.py, _run_server), for a
    browse-only server on `uri`: the store, artifacts read from where the runs put them, no job runner."""
    from mlflow.environment_variables import _MLFLOW_IN_JOB_EXECUTOR, _MLFLOW_SGI_NAME
    from mlflow.server.constants import ARTIFACT_ROOT_ENV_VAR, BACKEND_STORE_URI_ENV_VAR

    return {BACKEND_STORE_URI_ENV_VAR: uri, ARTIFACT_ROOT_ENV_VAR: artifact_root, _MLFLOW_SGI_NAME.name: "uvicorn",
            _MLFLOW_IN_JOB_EXECUTOR.name: "false", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def main(args) -> int:
    from orchestrator.tracking import resolve_uri

    uri = resolve_uri(args.uri)
    if uri.startswith(("http://", "https://")):
        print(f"runs are on a tracking server: open {uri} in a browser")
        return 0
    print(f"MLflow UI for {uri} at http://{args.host}:{args.port} (Ctrl-C to stop)", flush=True)
    warnings.filterwarnings("ignore", message="starlette.middleware.wsgi is deprecated")  # MLflow's, not ours
    from mlflow.server.handlers import initialize_backend_stores
    from mlflow.utils.server_cli_utils import resolve_default_artifact_root

    artifact_root = resolve_default_artifact_root(False, None, uri)  # as `mlflow server --no-serve-artifacts`
    os.environ.update(server_environment(uri, artifact_root))
    initialize_backend_stores(uri, uri, artifact_root)  # creates or upgrades the store's tables, as mlflow server
    import uvicorn

    # uvicorn stops on SIGINT and SIGTERM (closing open connections) and returns here
    uvicorn.run("mlflow.server.fastapi_app:app", host=args.host, port=args.port, workers=1, log_level="warning")
    return 0
