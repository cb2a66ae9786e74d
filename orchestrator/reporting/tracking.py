"""MLflow tracking through MlflowClient (explicit run ids: safe inside Ray tasks and threads).

The store is MLflow's own default in the working directory unless `tracking.uri` or MLFLOW_TRACKING_URI
says otherwise. If the tracking server cannot be reached, the run warns once and goes on without it; the
run directory still holds every metric (metrics.jsonl).
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

# MLflow's usage telemetry is off for every run and for `mooring ui` unless the user turns it on
# (MLFLOW_DISABLE_TELEMETRY=false; docs/how-to/compare.md, "MLflow and `mooring ui`")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
logging.getLogger("alembic").setLevel(logging.WARNING)


def resolve_uri(configured: str | None) -> str:
    """The tracking URI to use, made absolute so Ray workers in other directories find the same store."""
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        import mlflow

        uri = mlflow.get_tracking_uri()
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri.removeprefix("sqlite:///")).absolute())
    if "://" not in uri:
        return Path(uri).absolute().as_uri()
    return uri


def reachable(uri: str, timeout: float = 3.0) -> bool:
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https"):
        return True
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


class Tracker:
    """One MLflow run. Every call is a no-op after the first failure, which is reported once.

    Per-round metrics are buffered and written in one batch at most every `flush_seconds` (and at the end):
    a write to the store costs tens of milliseconds of the driver's CPU, which short rounds would feel."""

    MAX_BATCH = 1000  # MLflow's limit on metrics per log_batch

    def __init__(self, uri: str | None, experiment: str, enabled: bool = True, flush_seconds: float = 2.0):
        self.uri = resolve_uri(uri) if enabled else ""
        self.experiment = experiment
        self.enabled = enabled
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self._client = None
        self.flush_seconds = flush_seconds
        self._pending: list = []
        # when the buffer was last written; None until the first metric, so that the time the run spent starting
        # (seconds, after this Tracker is made) does not make its first round pay for a write
        self._last_flush: float | None = None
        if enabled and not reachable(self.uri):
            self._disable(f"tracking server {self.uri} is unreachable")

    def _disable(self, why: str) -> None:
        if self.enabled:
            print(f"warning: MLflow tracking off for this run: {why}; metrics are still in the run directory",
                  file=sys.stderr)
        self.enabled = False

    def _call(self, fn, *args, **kwargs):
        if not self.enabled:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # any tracking failure must not stop training
            self._disable(f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
            return None

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            from orchestrator.io.schema_lock import schema_lock

            with schema_lock(self.uri, "mlflow"):  # a new store's tables: one process at a time
                self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    # MLflow 3's UI opens an experiment in its GenAI view (traces) unless this tag names another kind; this
    # value is the one its "Model training" view is chosen by.
    EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}

    def _experiment_id(self) -> str:
        from mlflow.exceptions import MlflowException

        exp = self.client.get_experiment_by_name(self.experiment)
        if exp is None:
            try:
                return self.client.create_experiment(self.experiment, artifact_location=artifact_location(self.uri),
                                                     tags=self.EXPERIMENT_KIND)
            except MlflowException:  # another process created it since the lookup
                exp = self.client.get_experiment_by_name(self.experiment)
                if exp is None:
                    raise
        for key, value in self.EXPERIMENT_KIND.items():
            if exp.tags.get(key) is None:
                self.client.set_experiment_tag(exp.experiment_id, key, value)
        return exp.experiment_id

    def open(self) -> None:
        """MLflow imported, the store open (a new store's tables made) and the experiment found or made: what
        `start` needs besides the run's own tags, done ahead of it (a run does it while its data is prepared)."""
        if self.enabled and self.experiment_id is None:
            self.experiment_id = self._call(self._experiment_id)

    def start(self, run_name: str, params: dict[str, Any], tags: dict[str, str], parent_run_id: str | None = None,
              resume_run_id: str | None = None) -> str | None:
        def _start():
            if resume_run_id:
                self.client.update_run(resume_run_id, status="RUNNING")
                self.experiment_id = self.client.get_run(resume_run_id).info.experiment_id
                return resume_run_id
            all_tags = dict(tags)
            if parent_run_id:
                all_tags["mlflow.parentRunId"] = parent_run_id
            if self.experiment_id is None:
                self.experiment_id = self._experiment_id()
            run = self.client.create_run(self.experiment_id, run_name=run_name, tags=all_tags)
            self._log_params(run.info.run_id, params)
            return run.info.run_id

        self.run_id = self._call(_start)
        return self.run_id

    def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i:i + 100])

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        if self.run_id is None or not self.enabled:
            return  # before importing MLflow: an untracked run never pays for it
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._pending += [Metric(k, float(v), now, step) for k, v in metrics.items()
                          if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]
        if self._last_flush is None:
            self._last_flush = time.monotonic()
        elif time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def logged_steps(self, key: str = "round") -> set[int]:
        """The steps at which the run already has `key` (a resumed run: what its MLflow history holds)."""
        if self.run_id is None or not self.enabled:
            return set()
        history = self._call(self.client.get_metric_history, self.run_id, key) or []
        return {m.step for m in history}

    def log_summary(self, summary: dict[str, Any], step: int = 0) -> None:
        """Metrics that describe the whole run (None values left out), written at once."""
        self.log_metrics({k: v for k, v in summary.items() if v is not None}, step=step)
        self.flush()

    def log_table(self, rows: list[dict[str, Any]], artifact_file: str) -> None:
        """Rows as an MLflow table artifact (the UI's artifact view shows it as a sortable table)."""
        if self.run_id is not None and rows:
            columns = {k: [r.get(k) for r in rows] for k in rows[0]}
            self._call(self.client.log_table, self.run_id, columns, artifact_file)

    def flush(self) -> None:
        """Write the buffered metrics now."""
        pending, self._pending, self._last_flush = self._pending, [], time.monotonic()
        for i in range(0, len(pending), self.MAX_BATCH):
            self._call(self.client.log_batch, self.run_id, metrics=pending[i:i + self.MAX_BATCH])

    def set_tags(self, tags: dict[str, Any]) -> None:
        if self.run_id is not None:
            for k, v in tags.items():
                self._call(self.client.set_tag, self.run_id, k, str(v))

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        if self.run_id is not None:
            self._call(self.client.log_artifact, self.run_id, str(path), artifact_path)

    def end(self, status: str = "FINISHED") -> None:
        if self.run_id is not None:
            self.flush()
            self._call(self.client.set_terminated, self.run_id, status)

    def end_running_children(self, status: str = "KILLED") -> None:
        """End every run nested under this one that is still RUNNING: children whose process was stopped
        before they could end themselves."""
        if self.run_id is None or not self.enabled:
            return
        parent = self._call(self.client.get_run, self.run_id)
        if parent is None:
            return
        running = self._call(self.client.search_runs, [parent.info.experiment_id],
                             f"tags.mlflow.parentRunId = '{self.run_id}' and attributes.status = 'RUNNING'") or []
        for run in running:
            self._call(self.client.set_terminated, run.info.run_id, status)


def artifact_location(uri: str | None) -> str | None:
    """Where a new experiment keeps its runs' artifacts: beside a SQLite store's file (`mlartifacts/` in its
    folder), since MLflow's default is `./mlruns` of whatever directory the run was started from (a test suite's
    runs would land in the repository); None (MLflow's default) for any other store."""
    if not uri or not uri.startswith("sqlite:///"):
        return None
    return (Path(uri[len("sqlite:///"):]).resolve().parent / "mlartifacts").as_uri()
