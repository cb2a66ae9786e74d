"""`mooring sweep SWEEP_CONFIG [--n-trials N] [--max-failures N] [--storage URL] [--study NAME] [--address RAY]
[--best [--out PATH]]`.

Running the same command again resumes the study; `--best` prints its best trial and writes that trial's
config as a YAML file that `mooring run` accepts. SIGINT or SIGTERM stops it (exit 130 or 143) with the
finished trials kept in the study's storage.
"""
from __future__ import annotations

import sys

from orchestrator.arguments import add_address_arg, add_outside_code_arg, apply_outside_code


def configure(parser) -> None:
    parser.add_argument("sweep", metavar="SWEEP_CONFIG", help="sweep YAML (see configs/sweeps/)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="dotted override of the base experiment, repeatable: --set train.rounds=5")
    parser.add_argument("--n-trials", type=int, default=None, metavar="N", help="complete + pruned trials wanted")
    parser.add_argument("--storage", default=None, metavar="URL",
                        help="Optuna RDB storage (default: the sweep's, else sqlite:///optuna.db here)")
    parser.add_argument("--study", default=None, metavar="NAME", help="study name (default: the sweep file's name)")
    parser.add_argument("--max-failures", type=int, default=None, metavar="N",
                        help="failed trials after which the sweep stops, exit 1 (default: the sweep's max_failures, "
                             "else n_trials, at most 10)")
    parser.add_argument("--parallel", type=int, default=None, metavar="N", help="trials at once (default: as the CPUs hold)")
    add_address_arg(parser)
    parser.add_argument("--best", action="store_true", help="print the best trial and write its config; run nothing")
    parser.add_argument("--out", default=None, metavar="PATH", help="with --best: where to write it (default best-STUDY.yaml)")
    add_outside_code_arg(parser)


def main(args) -> int:
    from orchestrator.arguments import check_output_file
    from orchestrator.experiment.config import ConfigError
    from pipelines.sweep import best_recorded_on_test, load_best, print_result, run_sweep
    from pipelines.sweep_driver import format_params
    from pipelines.sweep_file import load_sweep
    from pipelines.sweep_objective import shown

    for flag, value in (("--n-trials", args.n_trials), ("--parallel", args.parallel),
                        ("--max-failures", args.max_failures)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} {value}: must be at least 1")
    apply_outside_code(args)
    sweep = load_sweep(args.sweep, n_trials=args.n_trials, storage_url=args.storage, study=args.study,
                       overrides=args.overrides, parallel=args.parallel, max_failures=args.max_failures)
    metric = sweep.config.objective.spec
    if args.best:
        trial, cfg = load_best(sweep)
        out = args.out or f"best-{sweep.study_name}.yaml"
        check_output_file(out, "--out")
        with open(out, "w") as f:
            f.write(cfg.to_yaml())
        print(f"best trial {trial.number}: {metric} = {trial.value:.6f} ({shown(trial.value, metric)})  {format_params(trial.params)}")
        tested = best_recorded_on_test(sweep.storage_url, sweep.study_name)
        print(tested.line(metric) if tested else "its test score: not measured yet (the sweep measures it when its "
              "trials are done)")
        print(f"wrote {out}; run it with `mooring run {out}`")
        return 0
    result = run_sweep(sweep, address=args.address, echo=lambda line: print(line, file=sys.stderr, flush=True))
    print_result(result, metric)
    return 0
