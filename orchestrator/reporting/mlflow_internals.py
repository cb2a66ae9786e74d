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


# ------------------------------------------------------------------------------ the UI's first page
# The choices MLflow's UI keeps in the browser's localStorage (key → JSON value), as its bundle names them
# (`useLocalStorage` stores KEY_v{version}): the "Model training" mode rather than GenAI, the assistant panel not
# opened by itself, and, with telemetry off, the telemetry notice already read and the UI's telemetry switch off.
BROWSER_CHOICES = {"mlflow.workflowType_v1": "machine_learning", "mlflow.assistant.panelOpen_v1": False,
                   "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": True}
TELEMETRY_OFF_CHOICES = {"mlflow.telemetry.info.alert.dismissed_v1": True, "mlflow.settings.telemetry.enabled_v1": False}
# an experiment page's saved view: its runs table's columns and expanded rows (LocalStorageUtils' scheme)
EXPERIMENT_VIEW_KEY = 'MLflowLocalStorage-1.1-ExperimentPage-["{experiment_id}"]-ReactComponentState'
# the strings the landing depends on, each looked for in the installed UI's bundle
UI_MARKERS = ("mlflow.workflowType", "mlflow.assistant.panelOpen", "mlflow.telemetry.info.alert.dismissed",
              "ExperimentPage", "ReactComponentState", "runsExpanded", "selectedColumns")

LANDING_SCRIPT = """<script>
(function () {
  var choices = %(choices)s, columns = %(columns)s, viewKey = %(view_key)s;
  try {
    Object.keys(choices).forEach(function (key) {
      if (localStorage.getItem(key) === null) localStorage.setItem(key, JSON.stringify(choices[key]));
    });
  } catch (e) { return; }
  if (location.hash && location.hash !== "#/") return;  // a link to a page of MLflow's opens that page
  function post(path, body) {
    return fetch(path, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)})
      .then(function (r) { return r.json(); });
  }
  // Mooring's experiment updated last, its newest comparison or sweep expanded, the summary metrics as columns
  post("ajax-api/2.0/mlflow/experiments/search", {max_results: 100, order_by: ["last_update_time DESC"]})
    .then(function (found) {
      var ours = (found.experiments || []).filter(function (e) {
        return (e.tags || []).some(function (t) { return t.key === "mlflow.experimentKind" && t.value === "custom_model_development"; });
      })[0];
      if (!ours) return;
      return post("ajax-api/2.0/mlflow/runs/search", {experiment_ids: [ours.experiment_id], max_results: 200,
                                                       order_by: ["attributes.start_time DESC"]})
        .then(function (runs) {
          var parent = (runs.runs || []).filter(function (r) {
            return ((r.data || {}).tags || []).some(function (t) { return t.key === "kind" && (t.value === "compare" || t.value === "sweep"); });
          })[0];
          var key = viewKey.replace("{experiment_id}", ours.experiment_id), expanded = {};
          if (parent) expanded[parent.info.run_id] = true;
          if (localStorage.getItem(key) === null)
            localStorage.setItem(key, JSON.stringify({selectedColumns: columns, runsExpanded: expanded}));
          if (!location.hash || location.hash === "#/") location.replace("#/experiments/" + ours.experiment_id + "/runs");
        });
    }).catch(function () {});
})();
</script>"""


def landing_page(index_html: str, summary_metrics: list[str], telemetry_off: bool) -> str:
    """MLflow's index.html with the landing script first in its head: on a browser's first visit the UI opens in
    the "Model training" mode on Mooring's runs, the summary metrics as columns; every choice is only made where
    the browser has none yet, so what the user changes in MLflow's UI stays as they left it."""
    import json

    choices = BROWSER_CHOICES | (TELEMETRY_OFF_CHOICES if telemetry_off else {})
    script = LANDING_SCRIPT % {"choices": json.dumps(choices), "view_key": json.dumps(EXPERIMENT_VIEW_KEY),
                               "columns": json.dumps([f"metrics.`{name}`" for name in summary_metrics])}
    head = index_html.find("<head>")
    if head < 0:
        return script + index_html
    return index_html[:head + len("<head>")] + script + index_html[head + len("<head>"):]


def missing_ui_markers(static_dir: Path) -> list[str]:
    """The strings the landing relies on that the installed UI's main bundle does not contain (a newer MLflow
    that renamed them): the landing then leaves MLflow's own first page as it is."""
    bundles = sorted((static_dir / "static" / "js").glob("main.*.js"))
    text = "".join(path.read_text(encoding="utf-8", errors="replace") for path in bundles)
    return [marker for marker in UI_MARKERS if marker not in text]
