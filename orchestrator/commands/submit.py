"""`mooring submit [--address URL] [--follow | --no-wait] -- run|compare|sweep ARGS...`: a pipeline as a Ray job.

The job runs `python -m orchestrator.cli PIPELINE ARGS` on the cluster's head node, with the directory submit runs
from as its working directory (orchestrator.ray_runtime.cluster.EXCLUDES left out): Mooring's checkout, or a project of the
user's own, whose packages travel with the job and run on the Mooring installed on the nodes. Before anything is
sent, ARGS are parsed as the pipeline would parse them and the configs they name are loaded with their --set
overrides: a tracking URI, checkpoint dir, partitions dir or sweep storage that is a relative local path would end
up on the head node only, so it is refused unless --allow-local-paths, which points such paths at the submitted
directory instead (on a single-node cluster it is on the head node: the job would otherwise write into Ray's
temporary copy). By default the command waits for the job and exits 0 only if it succeeded; --follow also prints
its logs; --no-wait returns after printing the job id.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from orchestrator.ray_runtime.cluster import PIPELINES, add_cluster_args


def configure(parser) -> None:
    add_cluster_args(parser)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--follow", action="store_true", help="print the job's logs as they come, until it ends")
    mode.add_argument("--no-wait", action="store_true", help="print the job id and return at once")
    parser.add_argument("--allow-local-paths", action="store_true",
                        help="a single-node cluster, submitted from the head node: relative local paths for "
                             "tracking, checkpoints, partitions, compare's --out and sweep storage are made absolute "
                             "under the directory submitted from (not Ray's temporary copy of it) and printed at the end")
    parser.add_argument("--allow-literal-password", action="store_true",
                        help="accept a password written out in a tracking or storage URI (it shows in the job's "
                             "entrypoint on the dashboard); by default use the '$NAME' form")
    parser.add_argument("pipeline", choices=PIPELINES, metavar="PIPELINE",
                        help=f"what the job runs: {', '.join(PIPELINES)}")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="its arguments, as for `mooring PIPELINE`; put `--` before PIPELINE")


def main(args) -> int:
    from orchestrator.ray_runtime import cluster

    cluster.dashboard_endpoint(args.address, args.allow_plain_http)  # a bad address is refused before all else
    pipeline_args = args.args[1:] if args.args[:1] == ["--"] else list(args.args)
    parsed = parse_pipeline_args(args.pipeline, pipeline_args)
    if getattr(parsed, "no_outside_code", False):  # the configs are loaded here too, before the job is sent
        from orchestrator.arguments import apply_outside_code

        apply_outside_code(parsed)
    root = cluster.job_directory()
    config_path, configs, storage = job_targets(args.pipeline, parsed)
    if config_path:
        cluster.check_config_path(config_path)
    if not args.allow_literal_password:
        cluster.refuse_literal_passwords(cluster.literal_password_problems(configs, storage))
    local_outputs: list[str] = []
    if args.allow_local_paths:
        local_outputs = cluster.anchor_local_paths(args.pipeline, parsed, configs, storage, root)
        pipeline_args += local_outputs
    else:
        problems = cluster.local_path_problems(configs, storage, needs_storage=args.pipeline == "sweep")
        resume = getattr(parsed, "resume", None)
        if resume and cluster.is_relative_local(resume):
            problems.append(f"--resume {resume!r}")
        cluster.refuse_local_paths(problems)

    api = cluster.JobsAPI(args.address, args.token_file, args.allow_plain_http)
    job_id = api.submit(args.pipeline, pipeline_args, root)
    print(job_id, flush=True)
    hint = f"mooring jobs {{}} {job_id} --address {api.url}"
    if args.no_wait:
        print(f"submitted to {api.url}; follow with `{hint.format('logs')} --follow`", file=sys.stderr)
        return 0
    try:
        if args.follow:
            api.follow(job_id)
        api.wait(job_id, echo=lambda line: print(line, file=sys.stderr))
    except KeyboardInterrupt:
        print(f"\nstopped waiting; the job goes on (stop it with `{hint.format('stop')}`)", file=sys.stderr)
        return 130
    try:
        return report_outcome(api, job_id)
    finally:
        if local_outputs:
            print("outputs on the head node: " + ", ".join(a.split("=", 1)[-1] for a in local_outputs
                                                          if a not in ("--set", "--out", "--storage")),
                  file=sys.stderr)


def parse_pipeline_args(pipeline: str, argv: list[str]) -> argparse.Namespace:
    """ARGS parsed by the pipeline's own parser: a bad ARGS fails here, not on the cluster."""
    from orchestrator.commands import COMMANDS
    from orchestrator.experiment.config import ConfigError

    module_name = COMMANDS[pipeline][0]
    if importlib.util.find_spec(module_name) is None:
        raise ConfigError(f"mooring {pipeline} is not available in this checkout (no module {module_name})")
    parser = argparse.ArgumentParser(prog=f"mooring submit -- {pipeline}")
    importlib.import_module(module_name).configure(parser)
    parsed = parser.parse_args(argv)
    if getattr(parsed, "address", None):
        raise ConfigError(f"--address after `{pipeline}`: the job runs on the cluster it is submitted to; "
                          "give that cluster with `mooring submit --address URL -- ...`")
    return parsed


def job_targets(pipeline: str, parsed) -> tuple[str | None, list, str | None]:
    """The config file ARGS name, the experiment configs the job will run (with the --set overrides), and for
    a sweep its Optuna storage as given (None: the default SQLite file)."""
    if pipeline == "sweep":
        from pipelines.sweep_file import load_sweep

        sweep = load_sweep(parsed.sweep, overrides=parsed.overrides, study=parsed.study)
        return parsed.sweep, [sweep.base], parsed.storage or sweep.config.storage
    from orchestrator.driver.run_dir import load_config_for_run

    resume = getattr(parsed, "resume", None)
    return parsed.config, [load_config_for_run(parsed.config, parsed.overrides, resume)], None


def report_outcome(api, job_id: str) -> int:
    status, message = api.outcome(job_id)
    if status == "SUCCEEDED":
        print(f"{job_id} succeeded", file=sys.stderr)
        return 0
    from orchestrator.driver.run_errors import RunError

    raise RunError(f"job {job_id} {status.lower()}: {message or 'no message'}; "
                   f"see `mooring jobs logs {job_id} --address {api.url}`")
