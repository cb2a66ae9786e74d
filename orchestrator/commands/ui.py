"""`mooring ui`: MLflow's web UI on the store that runs log to, for browsing on this machine.

It serves MLflow's tracking UI and REST API (experiments, runs, metrics, artifacts) from the store, and
nothing else, in this one process: MLflow's app under uvicorn, as `mlflow server --workers 1` would run it,
but without that command's launcher process and without its job runner (the huey consumers that run GenAI
evaluation jobs and trace roll-ups, never used by browsing). SIGINT (Ctrl-C) or SIGTERM stops it; nothing is
left behind because nothing else is started.

Importing MLflow's server takes seconds (pandas, SQLAlchemy, the GenAI modules), so the port opens at once:
the UI's page and its static files are answered straight from MLflow's build directory while the app loads
in a thread, and every other request (the REST API the page calls) waits for it. MLflow's lifespan hook,
which only reaps its assistant's sandbox containers, is not run.
"""
from __future__ import annotations

import asyncio
import os
import threading
import warnings
from pathlib import Path

from orchestrator.reporting.mlflow_internals import (
    landing_page,
    load_mlflow_app,
    missing_ui_markers,
    mlflow_static_dir,
)

# the runs table's columns on a first visit: what every run logs when it ends (orchestrator/driver/run.py, summary_metrics)
SUMMARY_COLUMNS = ["final_global_accuracy", "final_personalized_accuracy", "best_global_accuracy",
                   "best_personalized_accuracy", "bytes_sent", "wall_seconds"]


def configure(parser) -> None:
    parser.add_argument("--uri", default=None, metavar="URI",
                        help="tracking store to browse (default: MLFLOW_TRACKING_URI, else MLflow's default store "
                             "in this directory: where runs log when their config sets no tracking.uri)")
    parser.add_argument("--port", type=int, default=5000, help="port to serve on (default: 5000)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1, this machine only; MLflow answers other host "
                             "names only if MLFLOW_SERVER_ALLOWED_HOSTS lists them)")


class PageFirst:
    """ASGI app: MLflow's page and static files at once, everything else from MLflow's app once it has loaded."""

    def __init__(self, load_app, static_dir: Path, page: str):
        from starlette.responses import HTMLResponse
        from starlette.staticfiles import StaticFiles

        self._page = HTMLResponse(page)
        self._static = StaticFiles(directory=static_dir)
        self._app = None
        self._failure: BaseException | None = None
        self._loaded = threading.Event()
        # not a daemon: the interpreter ending a daemon thread inside an extension's C++ init (an early exit) aborts
        threading.Thread(target=self._load, args=(load_app,), name="mlflow-app-import").start()

    def _load(self, load_app) -> None:
        try:
            self._app = load_app()
        except BaseException as e:  # noqa: BLE001 - reported on every request that needs the app
            self._failure = e
        finally:
            self._loaded.set()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        path = scope.get("path", "")
        if scope["type"] == "http" and path == "/":
            return await self._page(scope, receive, send)
        if scope["type"] == "http" and path.startswith("/static-files/"):
            return await self._static({**scope, "path": path[len("/static-files"):]}, receive, send)
        if not self._loaded.is_set():
            await asyncio.get_running_loop().run_in_executor(None, self._loaded.wait)
        if self._app is None:
            from starlette.responses import PlainTextResponse

            reason = f"{type(self._failure).__name__}: {self._failure}"
            return await PlainTextResponse(f"MLflow's server failed to load: {reason}", 500)(scope, receive, send)
        await self._app(scope, receive, send)

    @staticmethod
    async def _lifespan(receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return


def check_can_listen(host: str, port: int) -> None:
    """One line, before the URL is printed and the server started, when the UI could not listen on host:port
    (uvicorn would report it only after the URL, as a logged `[Errno 98]`)."""
    import errno
    import socket

    from orchestrator.experiment.config import ConfigError

    if not 1 <= port <= 65535:
        raise ConfigError(f"--port {port}: a port is 1 to 65535")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise ConfigError(f"--host {host}: not an address of this machine ({e.strerror})") from None
    with socket.socket(family, kind, proto) as probe:
        # as uvicorn binds: a port left in TIME_WAIT by a closed server is free, one listened on is not
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ConfigError(f"--port {port}: port {port} on {host} is already in use; choose another with "
                                  "--port") from None
            raise ConfigError(f"--host {host} --port {port}: cannot listen there ({e.strerror or e})") from None


def first_page(static_dir: Path) -> str:
    """MLflow's page, opening on Mooring's runs (mlflow_internals.landing_page); MLflow's own page, with one
    warning, where the installed UI lacks what that relies on."""
    index = (static_dir / "index.html").read_text(encoding="utf-8")
    missing = missing_ui_markers(static_dir)
    if missing:
        print(f"warning: this MLflow's UI does not name {', '.join(missing)}: the UI opens on MLflow's own home "
              "page, not on Mooring's runs", flush=True)
        return index
    return landing_page(index, SUMMARY_COLUMNS, telemetry_off=telemetry_disabled())


def telemetry_disabled() -> bool:
    """MLflow's usage telemetry, off unless the user turned it on (orchestrator/reporting/tracking.py sets the default)."""
    return os.environ.get("MLFLOW_DISABLE_TELEMETRY", "").lower() in ("true", "1") or \
        os.environ.get("DO_NOT_TRACK", "").lower() in ("true", "1")


def main(args) -> int:
    from orchestrator.reporting.tracking import resolve_uri

    configured = args.uri or os.environ.get("MLFLOW_TRACKING_URI")  # else MLflow's default, a local store
    if configured and resolve_uri(configured).startswith(("http://", "https://")):
        print(f"runs are on a tracking server: open {configured} in a browser")
        return 0
    check_can_listen(args.host, args.port)
    print(f"MLflow UI at http://{args.host}:{args.port} (Ctrl-C to stop)", flush=True)
    warnings.filterwarnings("ignore", message="starlette.middleware.wsgi is deprecated")  # MLflow's, not ours
    import uvicorn

    static_dir = mlflow_static_dir()
    app = PageFirst(lambda: load_mlflow_app(resolve_uri(configured)), static_dir, first_page(static_dir))
    # uvicorn stops on SIGINT and SIGTERM (closing open connections) and returns here
    uvicorn.run(app, host=args.host, port=args.port, workers=1, log_level="warning")
    return 0
