"""What a lost tracking child never carried out (rounds' metrics, the summary, artifacts, tags), done by a Tracker in
the driver's own process when the run ends, so the MLflow run still gets all of it and its final status."""
from __future__ import annotations

from typing import Any

from orchestrator.reporting.tracker_channel import Call

# the calls a Tracker in the driver's process carries out again for a child that never did
REPLAYED = frozenset({"open", "log_summary", "log_table", "flush", "set_tags", "log_artifact", "end_running_children"})


def complete_here(calls: list[Call], configured: tuple, uri: str, run: tuple[Any, Any], lost: str,
                  status: str) -> tuple[Any, Any]:
    """`calls` done by a Tracker here (made from `configure`'s arguments, on the child's store `uri` where it
    reported one, for its MLflow `run`, (run id, experiment id)), and the MLflow run ended `status`, tagged with
    why tracking was `lost`; the run's (run id, experiment id). Metrics the child wrote without answering are not
    written twice (their rounds are in the store)."""
    from orchestrator.reporting.tracking import Tracker

    configured_uri, experiment, enabled = configured
    tracker = Tracker(uri or configured_uri, experiment, enabled)
    tracker.run_id, tracker.experiment_id = run
    logged = tracker.logged_steps("round")
    for name, args, kwargs in calls:
        if name == "log_metrics_batch":
            for metrics, step in args[0]:
                if not ("round" in metrics and step in logged):
                    tracker.log_metrics(metrics, step)
        elif name == "start" and tracker.run_id is None:
            made = kwargs.get("resume_run_id") or made_before(tracker, args[2])
            tracker.start(*args, **{**kwargs, "resume_run_id": made})
        elif name in REPLAYED:
            getattr(tracker, name)(*args, **kwargs)
    tracker.set_tags({"mlflow_tracking_lost": lost})
    tracker.end(status)
    return tracker.run_id, tracker.experiment_id


def made_before(tracker, tags: dict[str, str]) -> str | None:
    """The MLflow run a lost child may have made before it stopped answering `start`: this run directory's run,
    still RUNNING (a run directory is one run's)."""
    run_dir = tags.get("run_dir")
    tracker.open()
    if not run_dir or "'" in run_dir or tracker.experiment_id is None:
        return None
    try:
        found = tracker.client.search_runs(
            [tracker.experiment_id], f"tags.run_dir = '{run_dir}' and attributes.status = 'RUNNING'", max_results=1)
    except Exception:  # noqa: BLE001 - none found: a new MLflow run is made
        return None
    return found[0].info.run_id if found else None
