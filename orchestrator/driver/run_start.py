"""A run's set-up: Ray (where the run needs it), the data, the MLflow run, the coordinator and its client actors,
overlapped where they can be."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from orchestrator.driver import resume_config
from orchestrator.driver.local_coordinator import LocalCoordinator, get
from orchestrator.driver.local_coordinator import end as end_coordinator
from orchestrator.driver.preflight import check_engine, check_threat
from orchestrator.driver.run_context import RunContext
from orchestrator.driver.run_dir import code_version
from orchestrator.experiment.config import ExperimentConfig
from orchestrator.phases import Phases
from orchestrator.ray_runtime.placement import (
    clients_in_coordinator,
    coordinator_name,
    default_num_actors,
    on_this_node,
)
from orchestrator.ray_runtime.ray_start import (
    ensure_ray,
    in_a_ray_task,
    may_run_without_ray,
)
from orchestrator.reporting import run_names
from orchestrator.reporting.artifacts import import_plotting_meanwhile
from orchestrator.reporting.results import run_params
from orchestrator.reporting.tracking import Tracker


def set_up(ctx: RunContext):
    """Ray, data, MLflow run, coordinator and client actors; returns (coordinator, tracker). What does not depend
    on the rest overlaps: the data (and torch, which it imports) is prepared while Ray starts; the client
    actors' processes start (importing torch) while the data goes into the object store and MLflow opens its
    run; MLflow's store is opened (its import, its tables, the experiment) while the data is prepared. The
    coordinator is launched as soon as Ray is up, before the data says where the clients train
    (`early_coordinator`): a guess under resources.clients_on = auto, redone once the data is there where it was
    wrong. A run given no Ray cluster whose clients turn out to train in the coordinator starts no Ray at all: its
    coordinator runs in this process (orchestrator/driver/local_coordinator.py), as it does in a run that is a Ray
    task (`coordinator_in_this_process`); if they turn out to need client actors, Ray starts then. On failure the MLflow run, if one was opened, ends FAILED (KILLED on an interrupt)."""
    cfg, log, phases, snapshot = ctx.cfg, ctx.log, ctx.phases, ctx.snapshot
    data_ready = ctx.request.data
    coordinator = tracking_started = None
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="mooring-start") as background:
        if data_ready is None:
            data_ready = background.submit(timed, phases, "start: data (in the background)", prepare_data, cfg)
        tracker_opened = background.submit(timed, phases, "start: MLflow store (in the background)", open_tracker, cfg, ctx.request.tracker)
        try:
            guess = early_coordinator(cfg)
            here = coordinator_in_this_process(ctx.request.address)
            local = guess is True and here
            if not local:
                start_ray(ctx)
            if not ctx.resumed:
                log.write("config.yaml", cfg.to_yaml())
                resume_config.record(log.run_dir, cfg)
            if local:  # the coordinator's torch import and set-up overlap the data's
                coordinator = LocalCoordinator(cfg, log.run_dir)
            elif guess is not None:  # its process starts (and imports torch) while the data is prepared
                coordinator = launch_coordinator(ctx, clients_here=guess)
            with phases("start: wait for the data"):
                data = data_ready.result()
            check_engine(cfg, data)
            check_threat(cfg, data)
            clients_here = clients_in_coordinator(cfg, data)
            ctx.small_rounds = clients_here and cfg.resources.clients_on == "auto"
            if local and not clients_here:
                end_coordinator(coordinator)
                coordinator, local = None, False
                start_ray(ctx)
            elif coordinator is not None and guess != clients_here:
                with phases("start: coordinator relaunched (guessed wrong)"):
                    replace_coordinator(coordinator, coordinator_name(log.run_dir))
                coordinator = None
            if coordinator is None and clients_here and here:
                coordinator, local = LocalCoordinator(cfg, log.run_dir), True
            elif coordinator is None:
                coordinator = launch_coordinator(ctx, clients_here)
            tags = {"algorithm": cfg.algorithm.name, "dataset": cfg.data.dataset, "partition_hash": data.partition_hash,
                    **(data.partition.tally.as_tags() if data.partition.tally else {}),
                    "seed": str(cfg.seed), "code_version": code_version(), "run_dir": log.run_dir}
            tracking_started = background.submit(
                timed, phases, "start: MLflow run (in the background)", start_tracking, tracker_opened, tags,
                run_params(cfg), ctx.request.run_name or run_names.run_name(cfg.name, cfg.algorithm.block_name, cfg.seed),
                ctx.request.parent_run_id, log.read_json("run.json").get("mlflow_run_id"))
            # matplotlib, for the plot at the end: imported while the coordinator starts, the driver mostly waiting,
            # rather than during the first rounds, where it held the driver's GIL as their results came in
            plotting = import_plotting_meanwhile(log.run_dir)
            with phases("start: data into the object store"):
                data_box = [data] if local else [put_in_object_store(data)]
            # the object store holds it now: this process's copy goes (100,000 clients' images: hundreds of MB)
            del data
            data_ready = None
            with phases("start: client actors ready and loaded"):
                get(coordinator.start.remote(data_box, snapshot))
            del data_box
            with phases("start: wait for MLflow"):
                tracker = tracking_started.result()
            log.write("run.json", json.dumps({"mlflow_run_id": tracker.run_id, "tracking_uri": tracker.uri, **tags}))
            if local and plotting is not None:  # a coordinator in this process would run its rounds beside the
                with phases("start: wait for matplotlib"):  # import, taking turns with it for the GIL
                    plotting.join()
            with phases("start: set-up exchange"):
                # set_up also writes actors.json: where each client actor runs and what it was given
                get(coordinator.set_up.remote())
                # a call of no rounds: the driver's and the coordinator's first run_rounds call (its first-use costs
                # in Ray's call path) is paid here rather than by round 1 (orchestrator/clients/warm_up.py), and the
                # server's throwaway round where the clients train in the coordinator (Coordinator.run_rounds)
                get(coordinator.run_rounds.remote(0))
        except BaseException as e:
            abandon_set_up(coordinator, tracking_started, "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED")
            raise
    return coordinator, tracker


def start_ray(ctx: RunContext) -> None:
    """Ray connected to (or started), then this run's signal handlers put back over the one ray.init installs."""
    with ctx.phases("start: Ray"):
        ensure_ray(ctx.request.address)
    ctx.stop.install()


def coordinator_in_this_process(address: str | None) -> bool:
    """Whether a run whose clients all train in the coordinator runs its coordinator in this process
    (orchestrator/driver/local_coordinator.py) rather than in an actor: where it needs no Ray (below), and where
    this process is a Ray task (a `compare` job, a sweep trial), already a process on the cluster, as many of them
    at once as their driver's `parallel` says: an actor would be one more process to start, importing torch again
    (about 3 CPU-seconds), for a run that needs nothing of it."""
    return may_run_without_ray(address) or in_a_ray_task()


def put_in_object_store(data):
    import ray

    return ray.put(data)


def early_coordinator(cfg: ExperimentConfig) -> bool | None:
    """Whether to launch the coordinator before the data is there, and with which placement: with client actors
    (resources.clients_on: actors), training the clients itself (coordinator, and auto without GPUs, where a
    round of tiny clients trains in the coordinator and the start-up is most of a short run), or None: not before
    the data (auto with GPUs: client actors, unless the rounds turn out small)."""
    placement = cfg.resources.clients_on
    if placement == "auto":
        return True if cfg.resources.gpus_per_actor == 0 else None
    return placement == "coordinator"


def replace_coordinator(coordinator, name: str, timeout: float = 30.0) -> None:
    """End a coordinator launched with the wrong placement, and wait until Ray has released its name (and its
    CPUs), so that its replacement can take them."""
    import time

    import ray

    ray.kill(coordinator, no_restart=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get_actor(name)
        except ValueError:  # no actor of that name: released
            return
        time.sleep(0.02)


def launch_coordinator(ctx: RunContext, clients_here: bool):
    """The coordinator actor on this node; with `clients_here` it trains the clients itself, on one client actor's
    CPUs (where they train is decided once the data is there: orchestrator/ray_runtime/placement.py)."""
    from orchestrator.ray_runtime.actors import CoordinatorActor

    cfg = ctx.cfg
    with ctx.phases("start: launch coordinator"):
        return CoordinatorActor.options(
            name=coordinator_name(ctx.log.run_dir), scheduling_strategy=on_this_node(),
            num_cpus=cfg.resources.cpus_per_actor if clients_here else 0,
        ).remote(cfg, default_num_actors(cfg), ctx.log.run_dir, clients_here)


def abandon_set_up(coordinator, tracking_started, status: str) -> None:
    if coordinator is not None:
        end_coordinator(coordinator)
    if tracking_started is not None and tracking_started.exception() is None:
        tracking_started.result().end(status)


def open_tracker(cfg: ExperimentConfig, launched=None) -> Tracker:
    """The run's Tracker with MLflow imported and its store open (a new store's tables made, the experiment found
    or made): what does not need the data. `launched`: a TrackerProcess to serve it from its own process."""
    if launched is not None:
        tracker = launched.configure(cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.enabled)
    else:
        tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.enabled)
    tracker.open()
    return tracker


def start_tracking(tracker_opened, tags: dict[str, str], params: dict, run_name: str, parent_run_id: str | None,
                   resume_run_id: str | None) -> Tracker:
    """The MLflow run started, once `tracker_opened` (a Future of `open_tracker`) is there."""
    tracker = tracker_opened.result()
    tracker.start(run_name, params, tags, parent_run_id=parent_run_id, resume_run_id=resume_run_id)
    return tracker


def prepare_data(cfg: ExperimentConfig):
    """The run's FederatedData (imports torch and pyarrow: called in a thread, off the main thread's path to Ray)."""
    from orchestrator.experiment.datasets import prepare_data

    return prepare_data(cfg)


def timed(phases: Phases, name: str, fn, *args, **kwargs):
    with phases(name):
        return fn(*args, **kwargs)
