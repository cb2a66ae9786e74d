"""A sweep file made ready to run: its base experiment, its search space checked against the methods' ranges,
and its storage URL (pipelines/sweep_config.py is the file's schema)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.experiment.config import (
    RUN_NAME,
    ConfigError,
    ExperimentConfig,
    apply_overrides,
    build_config,
    digest,
    read_yaml,
    set_dotted,
    with_overrides,
)
from orchestrator.io import storage
from pipelines.sweep_config import (
    DEFAULT_MAX_FAILURES,
    DEFAULT_STORAGE,
    MAX_GRID_POINTS,
    CategoricalParam,
    GridSampler,
    SweepConfig,
    grid_size,
    param_from_search_space,
    read_sweep_config,
)
from pipelines.sweep_objective import check_objective, on_validation_split


@dataclass
class Sweep:
    """A sweep file resolved against its base experiment: what every trial varies and where results go."""

    source: str
    config: SweepConfig
    base: ExperimentConfig  # the experiment every trial starts from (overrides and `algorithm` applied)
    space: dict[str, Any]  # dotted config path → FloatParam | IntParam | CategoricalParam
    study_name: str
    storage_url: str
    n_trials: int
    parallel: int | None
    max_failures: int  # failed trials of one driver after which it stops the sweep

    @property
    def fingerprint(self) -> str:
        """What the study's trials measure: the base experiment (but for its name, where it runs, logs and
        checkpoints), the ranges searched and the objective. Trials of two fingerprints are two searches."""
        base = self.base.model_dump(mode="json", exclude={"name", "resources", "tracking", "checkpoint"})
        return digest({"base": base, "space": {p: v.model_dump(mode="json") for p, v in self.space.items()},
                       "objective": self.config.objective.model_dump(mode="json")})

    @property
    def sweep_dir(self) -> str:
        """Where trial run directories and the study's outputs go (absolute: Ray workers write there)."""
        runs = self.base.checkpoint.dir
        return storage.join(runs if "://" in runs else str(Path(runs).absolute()), "sweeps", self.study_name)


def load_sweep(path: str | Path, *, n_trials: int | None = None, storage_url: str | None = None,
               study: str | None = None, overrides: list[str] | tuple[str, ...] = (),
               parallel: int | None = None, max_failures: int | None = None) -> Sweep:
    """Read and check a sweep file: every parameter path must exist and its bounds must be valid values, the
    study name must make valid run names, and a grid must be small enough to make."""
    source = str(path)
    config = read_sweep_config(path)
    study_name = checked_study_name(study, config, source)
    base = base_experiment(config, Path(path), list(overrides))
    space = search_space(config, base, source)
    refuse_searched_overrides(list(overrides), space)
    check_enqueued(config, base, space, source)
    check_objective(config.objective, base, source)
    default_trials = checked_grid_size(config, space, source) if isinstance(config.sampler, GridSampler) else 20
    n_trials = n_trials or config.n_trials or default_trials
    return Sweep(source=source, config=config, base=base, space=space, study_name=study_name,
                 storage_url=absolute_storage_url(storage_url or config.storage or DEFAULT_STORAGE),
                 n_trials=n_trials, parallel=parallel or config.parallel,
                 max_failures=max_failures or config.max_failures or min(n_trials, DEFAULT_MAX_FAILURES))


def refuse_searched_overrides(overrides: list[str], space: dict[str, Any]) -> None:
    """A --set of a searched key would be replaced by every trial's own value: refused, not dropped."""
    from orchestrator.experiment.config import parse_override

    for text in overrides:
        key = ".".join(parse_override(text)[0])
        searched = next((p for p in space if p == key or p.startswith(key + ".") or key.startswith(p + ".")), None)
        if searched is not None:
            raise ConfigError(f"--set {text}: the sweep searches {searched}, so every trial sets its own value; "
                              "remove it from --set (or from the sweep's params)")


def trial_name(study_name: str, number: int) -> str:
    """The run name of a study's trial: its run directory's and MLflow run's."""
    return f"{study_name}-t{number:04d}"


def checked_study_name(study: str | None, config: SweepConfig, source: str) -> str:
    """--study, else the file's `study:`, else the file's name; refused in one line where its trials' run names
    would be (every trial would fail)."""
    name = study or config.study or Path(source).stem
    if len(name) <= 120 and RUN_NAME.fullmatch(trial_name(name, 0)):
        return name
    origin = ("--study" if study else f"{source}: study" if config.study
              else f"{source}: the file's name (set `study:` in it or --study NAME)")
    raise ConfigError(f"{origin}: {name!r} would name the trials' runs {trial_name(name, 0)!r}: a study name is "
                      "1-120 letters, digits, '.', '_', '+' or '-', starting with a letter or digit")


def checked_grid_size(config: SweepConfig, space: dict[str, Any], source: str) -> int:
    """The grid's size, counted before anything makes it; refused in one line above MAX_GRID_POINTS."""
    size = grid_size(space, config.sampler.points)
    if size <= MAX_GRID_POINTS:
        return size
    counts = " × ".join(f"{p.grid_count(config.sampler.points):,} ({path})" for path, p in space.items())
    raise ConfigError(f"{source}: sampler grid: {counts} = {size:,} points, over the limit of {MAX_GRID_POINTS:,}; "
                      "list fewer values (`grid:`, `choices:`, a larger `step`, fewer `points`) or use sampler "
                      "tpe or random")


def base_experiment(config: SweepConfig, sweep_path: Path, overrides: list[str]) -> ExperimentConfig:
    """The base file, then the sweep's overrides and `algorithm`, then the command line's --set; with a
    validation split for the trials to be scored on."""
    raw = read_yaml((sweep_path.parent / config.base).resolve())
    changes = {**config.overrides, **({"algorithm.name": config.algorithm} if config.algorithm else {})}
    for key, value in changes.items():
        set_dotted(raw, key, value)
    return on_validation_split(build_config(apply_overrides(raw, overrides), str(sweep_path)))


def search_space(config: SweepConfig, base: ExperimentConfig, source: str) -> dict[str, Any]:
    """`params`, after the named algorithm's default ranges; each path checked against the base config."""
    space: dict[str, Any] = {}
    if config.algorithm is not None:
        from tasks.algorithms import ALGORITHMS

        method = ALGORITHMS.get(base.algorithm.name)
        for name, spec in method.Params.search_space().items():
            space[f"algorithm.{method.name}.{name}"] = param_from_search_space(spec)
    space.update(config.params)
    if not space:
        raise ConfigError(f"{source}: nothing to search: give `params:` or an `algorithm:` with searchable "
                          "hyperparameters")
    for path, param in space.items():
        check_param(base, space, path, param, source)
    return space


def block_names(algorithms: list[str]) -> set[str]:
    """The hyperparameter block of each algorithm that exists (`algorithm.name`'s own check reports the others)."""
    from tasks.algorithms import ALGORITHMS
    from tasks.registry import RegistryError

    names = set()
    for name in algorithms:
        try:
            names.add(ALGORITHMS.find(name).name)
        except RegistryError:
            pass
    return names


def check_param(base: ExperimentConfig, space: dict[str, Any], path: str, param, source: str) -> None:
    """Unknown paths and values the experiment schema refuses fail here, before any trial runs."""
    parts = path.split(".")
    if parts[0] == "algorithm" and len(parts) == 3:
        runs = space["algorithm.name"].choices if "algorithm.name" in space else [base.algorithm.name]
        if parts[1] not in block_names(runs):
            raise ConfigError(f"{source}: params.{path}: the sweep runs {', '.join(map(str, runs))}, so "
                              f"{parts[1]}'s hyperparameters would not be used; set `algorithm: {parts[1]}`")
    values = param.choices if isinstance(param, CategoricalParam) else [param.low, param.high, *(param.grid or [])]
    for value in values:
        try:
            with_overrides(base, {path: value})
        except ConfigError as e:
            raise ConfigError(f"{source}: params.{path}: {str(e).removeprefix('config: ')}") from None


def check_enqueued(config: SweepConfig, base: ExperimentConfig, space: dict[str, Any], source: str) -> None:
    for i, params in enumerate(config.enqueue):
        unknown = sorted(set(params) - set(space))
        if unknown:
            raise ConfigError(f"{source}: enqueue[{i}]: {', '.join(unknown)} not searched; searched: "
                              f"{', '.join(space)}")
        try:
            with_overrides(base, params)
        except ConfigError as e:
            raise ConfigError(f"{source}: enqueue[{i}]: {str(e).removeprefix('config: ')}") from None


def absolute_storage_url(url: str) -> str:
    """A relative SQLite path made absolute, so Ray workers in other directories open the same file."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(url.removeprefix("sqlite:///")).absolute())
    return url


def redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: show it as given
        return url


def best_config(sweep: Sweep, trial) -> ExperimentConfig:
    return with_overrides(sweep.base, {**trial.params, "name": f"{sweep.study_name}-best"})


def absolute_paths_of(cfg: ExperimentConfig) -> ExperimentConfig:
    """The experiment with its local paths made absolute (pipelines/compare.py), as trials and the report need it."""
    from pipelines.comparison import absolute_paths

    return absolute_paths(cfg)

