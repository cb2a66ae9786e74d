"""One Mooring run as `mooring run` makes it where no Ray cluster is given, in a fresh process: no Ray session, so a
run whose clients train in the coordinator runs it in this process (orchestrator/driver/local_coordinator.py),
tracked from a process of its own (orchestrator/reporting/tracker_process.py). Prints one JSON line:
{"round_seconds": [...], "coordinator_round_seconds": [...], "run_dir": ...}.

    python -m benchmarks.mooring_process configs/default.yaml --set data.num_clients=100 ...
"""
from __future__ import annotations

import argparse
import json


def main() -> None:
    from orchestrator.driver.run import run_experiment
    from orchestrator.experiment.config import load_config
    from orchestrator.reporting.tracker_process import TrackerProcess

    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    cfg = load_config(args.config, args.overrides)
    tracker = TrackerProcess.launch() if cfg.tracking.enabled else None
    try:
        result = run_experiment(cfg, progress=False, tracker=tracker)
    finally:
        if tracker is not None:
            tracker.close()
    print(json.dumps({"round_seconds": result.round_seconds,
                      "coordinator_round_seconds": result.coordinator_round_seconds, "run_dir": result.run_dir}))


if __name__ == "__main__":
    main()
