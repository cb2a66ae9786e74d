"""`mooring run CONFIG [--set k=v ...] [--address RAY] [--output-json PATH] [--resume RUN_DIR]`."""
from __future__ import annotations

import json
import sys

from orchestrator.commands.common import add_address_arg, add_config_args


def configure(parser) -> None:
    add_config_args(parser, config_required=False)
    add_address_arg(parser)
    parser.add_argument("--output-json", default=None, metavar="PATH", help="write the result (accuracies, history) as JSON")
    parser.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue a stopped run from its last checkpoint")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def print_summary(result, tracking_uri: str | None) -> None:
    def pct(v):
        return "n/a" if v is None else f"{100 * v:.2f}%"

    print(f"\n{result.algorithm} (seed {result.seed}): final accuracy {pct(result.final_accuracy)}, "
          f"best {pct(result.best_accuracy)}"
          + (f", personalized {pct(result.personalized_accuracy)}" if result.personalized_accuracy is not None else "")
          + f", {result.rounds} rounds in {result.wall_seconds:.1f} s")
    print(f"run directory: {result.run_dir}")
    if result.mlflow_run_id:
        print(f"MLflow run {result.mlflow_run_id} in {tracking_uri}; browse with `mooring ui`")


def main(args) -> int:
    from orchestrator.run import load_config_for_run, run_experiment
    from orchestrator.tracking import resolve_uri

    cfg = load_config_for_run(args.config, args.overrides, args.resume)
    if args.output_json:
        _check_writable(args.output_json)
    result = run_experiment(cfg, address=args.address, resume_dir=args.resume, progress=not args.quiet and sys.stderr.isatty())
    print_summary(result, resolve_uri(cfg.tracking.uri) if cfg.tracking.enabled else None)
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(result.to_json(), f, indent=1)
    return 0


def _check_writable(path: str) -> None:
    """Refuse a bad --output-json before hours of training, not after."""
    from pathlib import Path

    from orchestrator.config import ConfigError

    parent = Path(path).absolute().parent
    if not parent.is_dir():
        raise ConfigError(f"--output-json {path}: directory {parent} does not exist")
