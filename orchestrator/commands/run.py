"""`mooring run CONFIG [--set k=v ...] [--address RAY] [--output-json PATH] [--no-outside-code] [--profile]`, or
`mooring run --resume RUN_DIR [--from-round N] [--set k=v ...] [--no-outside-code]` (the run's own config; a CONFIG
beside it is refused)."""
from __future__ import annotations

import json
from types import SimpleNamespace

from orchestrator.arguments import (
    add_address_arg,
    add_config_args,
    add_outside_code_arg,
    apply_outside_code,
    check_output_file,
)
from orchestrator.ray_runtime.ray_start import ray_session_held


def configure(parser) -> None:
    add_config_args(parser, config_required=False)
    add_address_arg(parser)
    parser.add_argument("--output-json", default=None, metavar="PATH", help="write the result (accuracies, history) as JSON")
    parser.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue a stopped run from its last checkpoint")
    parser.add_argument("--from-round", type=int, default=None, metavar="N",
                        help="with --resume: continue from the checkpoint of round N instead of the latest")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress (by default a bar on a terminal, else one line per round at most every 5 s)")
    add_outside_code_arg(parser)
    parser.add_argument("--profile", action="store_true",
                        help="print where the run's time went: start-up, each part of a round, shutdown")


def print_summary(result, tracking_uri: str | None) -> None:
    def pct(v):
        return "–" if v is None else f"{100 * v:.2f} %"

    print(f"\n{result.algorithm} (seed {result.seed}), {result.rounds} rounds in {result.wall_seconds:.1f} s\n"
          f"  global model:        final {pct(result.final_accuracy)}, best {pct(result.best_accuracy)}\n"
          f"  personalized models: final {pct(result.personalized_accuracy)}, "
          f"best {pct(result.best_personalized_accuracy)}")
    fair = result.fairness
    if fair.get("worst10_accuracy") is not None:
        print(f"  global model by client: mean {pct(fair['client_accuracy_mean'])}, worst 10 % "
              f"{pct(fair['worst10_accuracy'])}, spread (std) {pct(fair['client_accuracy_std'])}")
    if fair.get("personalized_worst10_accuracy") is not None:
        print(f"  personalized by client: mean {pct(fair['personalized_accuracy_client_mean'])}, worst 10 % "
              f"{pct(fair['personalized_worst10_accuracy'])}, spread (std) "
              f"{pct(fair['personalized_accuracy_client_std'])}")
    if result.clients_failed:
        print(f"  failed clients:      {result.clients_failed} (left out of their round: their client actor was lost "
              "twice; clients_failed in metrics.jsonl says which rounds)")
    print(f"run directory: {result.run_dir}")
    if result.mlflow_run_id:
        print(f"MLflow run {result.mlflow_run_id} in {tracking_uri}; browse with `mooring ui`")


def main(args) -> int:
    from orchestrator.driver.run import run_experiment
    from orchestrator.ray_runtime.ray_start import exit_without_ray_shutdown, may_run_without_ray
    from orchestrator.reporting.tracking import resolve_uri

    check_resume_args(args)
    apply_outside_code(args)
    if args.output_json:
        check_output_file(args.output_json)
    if args.resume:
        from orchestrator.driver.run_dir import RunLog, verified_checkpoint

        verified_checkpoint(args.resume, args.from_round)  # a damaged checkpoint is refused before Ray starts
        RunLog(args.resume).check_records()  # and a damaged run.json or metrics.jsonl
    local_instance = may_run_without_ray(args.address)  # any Ray this command uses, it starts itself
    tracker = None
    try:
        cfg, data, before_run, tracker = config_and_ray(args, local_instance)
        result = run_experiment(cfg, address=args.address, resume_dir=args.resume, from_round=args.from_round,
                                progress=not args.quiet, data=data, tracker=tracker, run_name=named(cfg, args))
    except BaseException:
        if local_instance and ray_session_held():
            shutdown_ray()
        raise
    finally:
        if tracker is not None:
            tracker.close()
    print_summary(result, resolve_uri(cfg.tracking.uri) if cfg.tracking.enabled else None)
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(result.to_json(), f, indent=1)
    if args.profile:
        print_profile(result, before_run, local_instance)
    if local_instance:
        exit_without_ray_shutdown()
    return 0


def clients_may_train_in_coordinator(raw: dict) -> bool:
    """The run's resources block (alone, so torch is not imported for it) allows its clients to train in the
    coordinator (orchestrator/driver/run_start.py's `early_coordinator`): then its Ray, if the data says it needs
    any, starts once the data is there. A block that does not validate: False (the whole config's validation says
    why)."""
    from orchestrator.driver.run_start import early_coordinator
    from orchestrator.experiment.config import ResourcesConfig

    try:
        resources = ResourcesConfig.model_validate(raw.get("resources") or {})
    except Exception:  # noqa: BLE001 - pydantic's errors; reported by the full validation
        return False
    return early_coordinator(SimpleNamespace(resources=resources)) is True


def check_resume_args(args) -> None:
    """--from-round only with --resume; and a resume reads the run's own config, so a CONFIG beside --resume (which
    would be ignored) is refused rather than silently dropped."""
    from orchestrator.experiment.config import ConfigError

    if args.from_round is not None and not args.resume:
        raise ConfigError("--from-round N needs --resume RUN_DIR")
    if args.resume and args.config is not None:
        raise ConfigError(f"mooring run {args.config} --resume {args.resume}: a resume continues the run with its own "
                          f"config ({args.resume}/config.yaml); give no CONFIG (change what may change with --set)")


def named(cfg, args) -> str | None:
    """A new run's MLflow name: its config, method and seed, and what --set changes (a resumed run keeps its own)."""
    if args.resume:
        return None
    from orchestrator.reporting.run_names import run_name
    from pipelines.compare import dotted_set

    return run_name(cfg.name, cfg.algorithm.block_name, cfg.seed, dotted_set(args.overrides))


def config_and_ray(args, start_ray: bool):
    """The validated config, its data (a Future, or None: the run prepares it), the phases so far (for
    --profile) and the run's TrackerProcess (orchestrator/reporting/tracker_process.py: launched as soon as the
    raw config says tracking is on, so MLflow is imported on another core meanwhile; None when it is off). Where this command starts a local Ray instance, it starts it while a thread validates the config
    and then prepares the data: validating imports torch and every model and algorithm, the data pyarrow (seconds
    of CPU), and starting Ray is mostly waiting for its processes. The config file's own errors (missing, not
    YAML, a bad --set) come first, before Ray; a bad value comes once Ray has started (and the caller stops it)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from orchestrator.driver.run_dir import raw_config_for_run
    from orchestrator.experiment.config import build_config
    from orchestrator.ray_runtime.ray_start import ensure_ray
    from orchestrator.reporting.tracker_process import TrackerProcess

    raw, source = raw_config_for_run(args.config, args.overrides, args.resume)
    tracker = TrackerProcess.launch() if (raw.get("tracking") or {}).get("enabled", True) is not False else None
    launched = seconds_since_launch()
    if not start_ray or clients_may_train_in_coordinator(raw):
        return (build_config(raw, source), None, {"start: interpreter, imports, config": [seconds_since_launch()]},
                tracker)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mooring-config")
    data_seconds: list[float] = []
    validated = pool.submit(build_config, raw, source)
    data = pool.submit(_checked_data, validated, data_seconds)  # one thread: after the validation
    pool.shutdown(wait=False)
    started = time.perf_counter()
    ensure_ray(args.address)
    ray_seconds = time.perf_counter() - started
    return validated.result(), data, {"start: interpreter, imports": [launched],
                                      "start: Ray (config, then data, in the background)": [ray_seconds],
                                      "start: data (in the background)": data_seconds}, tracker


def _checked_data(validated, seconds: list[float]):
    """The data of a validated config once its output directories are known to be writable (as the run checks
    them first, and this runs before the run)."""
    import time

    from orchestrator.driver.run_dir import check_output_dirs
    from orchestrator.driver.run_start import prepare_data

    cfg = validated.result()
    check_output_dirs(cfg)
    start = time.perf_counter()
    try:
        return prepare_data(cfg)
    finally:
        seconds.append(time.perf_counter() - start)


def seconds_since_launch() -> float:
    """Seconds since this process started: the interpreter, the imports and reading the config."""
    import time

    import psutil

    return time.time() - psutil.Process().create_time()


def print_profile(result, before_run: dict[str, list[float]], ray_started_here: bool) -> None:
    """Every phase's count, median and total (see orchestrator/phases.py), then Ray's shutdown, timed here
    (none where the run went without Ray)."""
    import time

    from orchestrator.phases import profile_table

    phases = {**before_run, **result.phases}
    if ray_session_held():
        from orchestrator.ray_runtime.ray_start import end_local_instance

        shutdown = time.perf_counter()
        if ray_started_here:
            end_local_instance(orderly=True)
        else:
            import ray

            ray.shutdown()
        phases["end: Ray shutdown"] = [time.perf_counter() - shutdown]
    print("\nwhere the time went (a phase marked 'in the background' overlaps others):")
    print(profile_table(phases))


def shutdown_ray() -> None:
    """Stop the Ray instance this command started before exiting, so none of its processes outlive the
    command."""
    from orchestrator.ray_runtime.ray_start import end_local_instance

    end_local_instance(orderly=True)
