"""What a run is refused for before anything starts, in one line each: its output directories (writable), its
engine (a `train.engine: vectorized` the method or model cannot run on) and its devices (actors the cluster can
place). `mooring run` checks its one config; `compare`, `sweep` and `claims` check every variant's config
before the first run starts, so no table is left half-written by a variant that could never run."""
from __future__ import annotations

from orchestrator.experiment.config import ConfigError, ExperimentConfig


def check_engine(cfg: ExperimentConfig, data) -> None:
    """Refuse a `train.engine: vectorized` the method or its model cannot run on (`auto` falls back and
    `sequential` runs anything, so neither builds the model here). `data`: anything with num_classes and
    input_shape (a FederatedData, or the dataset alone)."""
    from orchestrator.experiment.methods import build_algorithm
    from tasks.algorithms.engines import choose_engine

    if cfg.train.engine != "vectorized":
        return
    try:
        choose_engine(cfg.train.engine, build_algorithm(cfg, data.num_classes, data.input_shape))
    except ValueError as e:
        raise ConfigError(str(e)) from None


def check_runnable(cfg: ExperimentConfig) -> None:
    """The checks a config passes before its run starts that need no Ray: output directories, then the engine
    (loading the dataset, not its partition, only where the engine asks for it)."""
    from orchestrator.driver.run_dir import check_output_dirs

    check_output_dirs(cfg)
    backdoor = cfg.threat is not None and cfg.threat.attack == "backdoor"
    if cfg.train.engine == "vectorized" or backdoor:
        from orchestrator.experiment.datasets import _loader_options
        from tasks.data.datasets import load_dataset

        dataset = load_dataset(_loader_options(cfg))
        check_engine(cfg, dataset)
        check_threat(cfg, dataset)


def check_threat(cfg: ExperimentConfig, data) -> None:
    """Refuse a backdoor whose target is not one of the data's classes. `data`: anything with num_classes."""
    threat = cfg.threat
    if threat is not None and threat.attack == "backdoor" and threat.target >= data.num_classes:
        raise ConfigError(f"threat.target = {threat.target}: the data has {data.num_classes} classes "
                          f"(0 .. {data.num_classes - 1})")


def check_variants(configs: dict[str, ExperimentConfig], check=check_runnable) -> None:
    """`check(cfg)` passes for every variant's config, or a ConfigError with one line per refused variant, each
    starting with the variant's label."""
    from orchestrator.driver.run_errors import RunError

    problems = []
    for label, cfg in configs.items():
        try:
            check(cfg)
        except (ConfigError, RunError) as e:
            problems.append(f"{label}: {e}")
    if problems:
        raise refusal(problems)


NEXT_LINE = "\nerror: "  # the command line prints "error: " before the first refusal; this before each other


def refusal(problems: list[str]) -> ConfigError:
    """One ConfigError for several refusals, one line each."""
    return ConfigError(NEXT_LINE.join(problems))


def refusal_lines(err: ConfigError) -> list[str]:
    """The refusals of one ConfigError, one per line (the inverse of `refusal`)."""
    return str(err).split(NEXT_LINE)


def check_devices(cfg: ExperimentConfig, num_actors: int) -> None:
    """The run's client actors fit the Ray cluster's CPUs and GPUs (orchestrator/ray_runtime/placement.py)."""
    import ray

    from orchestrator.ray_runtime.placement import check_fits

    check_fits(cfg, num_actors, ray.cluster_resources())
