"""`mooring sweep`: an Optuna study whose trials are federated runs on Ray.

    run_sweep(load_sweep("configs/sweeps/fedfa.yaml"))
      ├─ open (or create) the study in its RDB storage; one MLflow parent run per study, reused on resume
      ├─ trials left RUNNING by a driver that is gone → FAIL (reason recorded), their parameters enqueued again
      ├─ until n_trials trials are COMPLETE or PRUNED (counted in the storage, so several drivers can share it):
      │     study.ask() → trial config → Ray task (num_cpus=0) → run_experiment with its own client actor
      │     in the task: trial.report(accuracy, round) every round; should_prune() → TrialPruned stops the run
      │     study.tell(COMPLETE | PRUNED | FAIL), with the reason of a failure as the trial's "fail_reason"
      └─ at the end, on the parent run: best parameters, trials.csv, Optuna's plots, the best config as YAML

A trial that diverges (a NaN or infinite loss) is pruned, so the sampler learns to avoid its region; one
that raises is failed. Neither stops the sweep. Trials that fail do not count towards n_trials.
"""
from __future__ import annotations

import json
import math
import os
import socket
import sys
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import storage
from orchestrator.config import (
    ConfigError,
    ExperimentConfig,
    apply_overrides,
    build_config,
    read_yaml,
    set_dotted,
    with_overrides,
)
from orchestrator.run import RunError
from pipelines.sweep_config import (
    DEFAULT_STORAGE,
    CategoricalParam,
    GridSampler,
    MedianPruner,
    RandomSampler,
    SuccessiveHalvingPruner,
    SweepConfig,
    grid_size,
    param_from_search_space,
    read_sweep_config,
)
from pipelines.trial_store import TrialReporter, TrialStore

PARENT_RUN_ATTR = "mlflow_parent_run_id"
DRIVER_GRACE_SECONDS = 120.0  # a driver silent this long (heartbeat) is taken for gone
HEARTBEAT_SECONDS = 15.0


# ------------------------------------------------------------------------------------ the sweep file
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

    @property
    def sweep_dir(self) -> str:
        """Where trial run directories and the study's outputs go (absolute: Ray workers write there)."""
        runs = self.base.checkpoint.dir
        return storage.join(runs if "://" in runs else str(Path(runs).absolute()), "sweeps", self.study_name)


def load_sweep(path: str | Path, *, n_trials: int | None = None, storage_url: str | None = None,
               study: str | None = None, overrides: list[str] | tuple[str, ...] = (),
               parallel: int | None = None) -> Sweep:
    """Read and check a sweep file: every parameter path must exist and its bounds must be valid values."""
    source = str(path)
    config = read_sweep_config(path)
    base = base_experiment(config, Path(path), list(overrides))
    space = search_space(config, base, source)
    check_enqueued(config, base, space, source)
    grid_points = config.sampler.points if isinstance(config.sampler, GridSampler) else 0
    default_trials = grid_size(space, grid_points) if grid_points else 20
    return Sweep(source=source, config=config, base=base, space=space,
                 study_name=study or config.study or Path(path).stem,
                 storage_url=absolute_storage_url(storage_url or config.storage or DEFAULT_STORAGE),
                 n_trials=n_trials or config.n_trials or default_trials, parallel=parallel or config.parallel)


def base_experiment(config: SweepConfig, sweep_path: Path, overrides: list[str]) -> ExperimentConfig:
    """The base file, then the sweep's overrides and `algorithm`, then the command line's --set."""
    raw = read_yaml((sweep_path.parent / config.base).resolve())
    changes = {**config.overrides, **({"algorithm.name": config.algorithm} if config.algorithm else {})}
    for key, value in changes.items():
        set_dotted(raw, key, value)
    return build_config(apply_overrides(raw, overrides), str(sweep_path))


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


# ---------------------------------------------------------------------------------- Optuna objects
def quiet_optuna():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def open_storage(url: str):
    """The RDB storage; a URL that does not open is one line (bad scheme, no server, no such directory)."""
    from optuna.storages import RDBStorage

    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 60}}  # trials in other processes write at the same time
    elif url.startswith("postgresql"):
        engine_kwargs = {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    from orchestrator.schema_lock import schema_lock

    try:
        with schema_lock(url, "optuna"):  # a new database's tables: one driver at a time
            return RDBStorage(url, engine_kwargs=engine_kwargs)
    except Exception as e:  # SQLAlchemy and driver errors have many types; each means the same to the user
        why = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise ConfigError(f"--storage {redacted(url)}: cannot open the Optuna storage: {why}") from None


def build_pruner(spec):
    import optuna

    if isinstance(spec, MedianPruner):
        # steps are rounds, counted from 1: Optuna never prunes step < n_warmup_steps
        return optuna.pruners.MedianPruner(spec.n_startup_trials, spec.n_warmup_steps + 1, spec.interval_steps)
    if isinstance(spec, SuccessiveHalvingPruner):
        return optuna.pruners.SuccessiveHalvingPruner(spec.min_resource, spec.reduction_factor,
                                                      spec.min_early_stopping_rate)
    return optuna.pruners.NopPruner()


def build_sampler(sweep: Sweep, seed: int):
    optuna = quiet_optuna()
    spec = sweep.config.sampler
    if isinstance(spec, GridSampler):
        class AskTellGridSampler(optuna.samplers.GridSampler):
            """Optuna's grid sampler stops Study.optimize once the grid is used up; here the driver counts."""

            def after_trial(self, study, trial, state, values):
                pass

        grid = {path: p.grid_values(spec.points) for path, p in sweep.space.items()}
        return AskTellGridSampler(grid, seed=seed)
    if isinstance(spec, RandomSampler):
        return optuna.samplers.RandomSampler(seed=seed)
    # constant_liar: trials still running count as bad guesses, so parallel trials spread out
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=spec.n_startup_trials,
                                      multivariate=spec.multivariate, constant_liar=True)


def distributions(sweep: Sweep) -> dict[str, Any]:
    return {path: p.distribution() for path, p in sweep.space.items()}


def open_study(sweep: Sweep, storage_obj):
    """(study, created): created is True for the one driver whose call made the study."""
    optuna = quiet_optuna()
    pruner = build_pruner(sweep.config.pruner)
    try:
        study = optuna.create_study(study_name=sweep.study_name, storage=storage_obj, direction="maximize",
                                    sampler=build_sampler(sweep, sweep.config.sampler.seed), pruner=pruner)
        return study, True
    except optuna.exceptions.DuplicatedStudyError:
        pass
    known = len(optuna.load_study(study_name=sweep.study_name, storage=storage_obj).trials)
    # joining or resuming: another seed, so this driver does not propose the points already proposed
    seed = sweep.config.sampler.seed + 7919 * known + os.getpid() % 7919
    study = optuna.load_study(study_name=sweep.study_name, storage=storage_obj,
                              sampler=build_sampler(sweep, seed), pruner=pruner)
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise ConfigError(f"--study {sweep.study_name}: that study minimises; a sweep maximises its objective")
    return study, False


# ------------------------------------------------------------------------------------------ one trial
@dataclass
class TrialJob:
    number: int
    cfg: ExperimentConfig
    study_name: str
    storage_url: str
    pruner: Any
    objective: Any  # ObjectiveConfig
    parent_run_id: str | None


@dataclass
class TrialOutcome:
    state: str  # complete | pruned | failed
    value: float | None = None
    reason: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    mlflow_run_id: str | None = None
    wall_seconds: float = 0.0

    @property
    def rounds(self) -> int:
        return len(self.history)

    @property
    def client_rounds(self) -> int:
        """Σ over the rounds run of the clients trained: what the trial cost."""
        return sum(int(m.get("clients", 0)) for m in self.history)


class Diverged(Exception):
    pass


def check_finite_losses(metrics: dict[str, Any]) -> None:
    for key, value in metrics.items():
        if "loss" in key and isinstance(value, float) and not math.isfinite(value):
            raise Diverged(f"diverged: {key} = {value} at round {metrics.get('round')}")


class OverBudget(Exception):
    """A trial's ε passed the sweep's privacy budget (objective.max_epsilon), or it logs none to bound."""


def check_budget(metrics: dict[str, Any], objective: Any, last_round: int) -> None:
    """Raise OverBudget once the round's ε exceeds objective.max_epsilon (ε only grows with the rounds), or at
    the last round of a run that logged no ε (no noise: no bound holds)."""
    if objective.max_epsilon is None:
        return
    key, bound = objective.epsilon_metric, objective.max_epsilon
    epsilon = metrics.get(key)
    if epsilon is not None and epsilon > bound:
        raise OverBudget(f"pruned after round {metrics.get('round')}: {key} = {epsilon:.3g} exceeds max_epsilon = {bound:g}")
    if epsilon is None and metrics.get("round") == last_round:
        raise OverBudget(f"pruned: the run logs no {key} (no privacy noise), so max_epsilon = {bound:g} cannot hold")


def run_trial(job: TrialJob) -> TrialOutcome:
    """The Ray task of one trial: the run, reporting the objective's metric to Optuna after every round."""
    import optuna

    from orchestrator.run import run_experiment
    from pipelines.compare import aggregate_metric

    quiet_optuna()
    t0 = time.perf_counter()
    storage_obj = open_storage(job.storage_url)
    study = optuna.load_study(study_name=job.study_name, storage=storage_obj,
                              sampler=optuna.samplers.RandomSampler(), pruner=build_pruner(job.pruner))
    trial = TrialReporter(study, TrialStore(storage_obj, job.study_name), job.number)
    metric = job.objective.metric
    history: list[dict[str, Any]] = []

    def on_round(metrics: dict[str, Any]) -> None:
        history.append(metrics)
        check_finite_losses(metrics)
        check_budget(metrics, job.objective, job.cfg.train.rounds)
        value = metrics.get(metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        trial.report(float(value), step=int(metrics["round"]))
        if trial.should_prune():
            raise optuna.TrialPruned(f"pruned after round {metrics['round']}: {metric} = {value:.4f}")

    def outcome(state: str, **kw) -> TrialOutcome:
        return TrialOutcome(state, history=history, mlflow_run_id=trial_run_id(job.cfg),
                            wall_seconds=time.perf_counter() - t0, **kw)

    try:
        result = run_experiment(job.cfg, progress=False, parent_run_id=job.parent_run_id, on_round=on_round)
    except optuna.TrialPruned as e:
        return outcome("pruned", reason=str(e))
    except (Diverged, OverBudget) as e:
        return outcome("pruned", reason=str(e))
    except Exception as e:  # whatever a trial raises fails that trial only; the sweep goes on
        return outcome("failed", reason=one_line(e))
    value = aggregate_metric(result.history, job.objective.spec)
    if value is None:
        keys = sorted({k for m in result.history for k in m})
        return outcome("failed", reason=f"objective metric {metric!r} is not in the run's metrics ({', '.join(keys)})")
    return outcome("complete", value=value)


def one_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300]}" if text else type(e).__name__


def trial_run_id(cfg: ExperimentConfig) -> str | None:
    """The MLflow run of a trial, from run.json in the trial's only run directory (there even if it raised)."""
    from orchestrator.run import RunLog

    for name in storage.list_dir(cfg.checkpoint.dir):
        run_id = RunLog(storage.join(cfg.checkpoint.dir, name)).read_json("run.json").get("mlflow_run_id")
        if run_id:
            return run_id
    return None


def trial_config(sweep: Sweep, base_abs: ExperimentConfig, params: dict[str, Any], number: int) -> ExperimentConfig:
    """The base with the trial's parameters; one client actor per trial, its own run directory. A non-finite
    loss does not stop the run: the sweep prunes the trial as diverged (check_finite_losses), with its reason."""
    return with_overrides(base_abs, {
        **params, "name": f"{sweep.study_name}-t{number:04d}", "resources.num_actors": 1,
        "train.on_nonfinite_loss": "continue",
        "checkpoint.dir": storage.join(sweep.sweep_dir, f"trial-{number:04d}"),
    })


# ---------------------------------------------------------------------------------------- the driver
@dataclass
class SweepResult:
    study_name: str
    storage_url: str
    complete: int
    pruned: int
    failed: int
    best_number: int | None
    best_value: float | None
    best_params: dict[str, Any]
    parent_run_id: str | None
    outputs: list[str] = field(default_factory=list)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, and another user's
        pass
    return True


class Driver:
    """One process running trials of a study; several may share it. Each records a heartbeat in the study
    and its id on the trials it runs, so a trial whose driver is gone is recognised and retried."""

    def __init__(self, sweep: Sweep, study, store: TrialStore, parent_run_id: str | None, parallel: int, echo):
        self.sweep, self.study, self.store, self.echo = sweep, study, store, echo
        self.parent_run_id = parent_run_id
        self.parallel = parallel
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.base_abs = _absolute(sweep.base)
        self.pending: dict[Any, Any] = {}  # ObjectRef → optuna Trial
        self.failures: list[str] = []
        self.last_beat = 0.0
        self.states = quiet_optuna().trial.TrialState

    # ------------------------------------------------------------------ bookkeeping in the storage
    def heartbeat(self, force: bool = False) -> None:
        now = time.time()
        if force or now - self.last_beat >= HEARTBEAT_SECONDS:
            self.study.set_user_attr(f"driver:{self.id}", now)
            self.last_beat = now

    def trials(self, *states):
        return self.study.get_trials(deepcopy=False, states=states or None)

    def counts(self) -> dict[str, int]:
        s = self.states
        by_state = {"complete": s.COMPLETE, "pruned": s.PRUNED, "failed": s.FAIL, "running": s.RUNNING,
                    "waiting": s.WAITING}
        trials = self.trials()
        return {name: sum(t.state == state for t in trials) for name, state in by_state.items()}

    def done(self) -> int:
        return len(self.trials(self.states.COMPLETE, self.states.PRUNED))

    def stale_reason(self, trial, attrs: dict[str, Any], now: float) -> str | None:
        """Why a RUNNING trial has nobody running it, or None while its driver lives."""
        driver = trial.user_attrs.get("driver")
        if driver == self.id:
            return None
        if driver is None:
            started = trial.datetime_start.timestamp() if trial.datetime_start else now
            return "no driver recorded it" if now - started > DRIVER_GRACE_SECONDS else None
        host, pid, _ = driver.rsplit(":", 2)
        if host == socket.gethostname() and not pid_alive(int(pid)):
            return f"its driver {driver} is gone"
        silent = now - float(attrs.get(f"driver:{driver}", 0.0))
        return f"its driver {driver} was silent for {silent:.0f} s" if silent > DRIVER_GRACE_SECONDS else None

    def recover_stale(self) -> None:
        attrs, now = self.study.user_attrs, time.time()
        for trial in self.trials(self.states.RUNNING):
            reason = self.stale_reason(trial, attrs, now)
            if reason is not None:
                self.fail_and_retry(trial, f"trial left RUNNING: {reason}; failed and enqueued again")

    def fail_and_retry(self, trial, reason: str) -> None:
        """FAIL a trial nobody runs and enqueue its parameters; of drivers racing for it, one wins the tell."""
        from optuna.exceptions import UpdateFinishedTrialError

        try:
            self.store.set_user_attr(trial.number, "fail_reason", reason)
            self.study.tell(trial.number, state=self.states.FAIL)
        except (UpdateFinishedTrialError, ValueError):
            return
        self.study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
        self.echo(f"trial {trial.number} failed   {reason}")

    # ------------------------------------------------------------------ launching and finishing trials
    def launch(self, remote) -> bool:
        """Start one trial if the study still needs one; False when it does not."""
        counts = self.counts()
        if counts["complete"] + counts["pruned"] + counts["running"] >= self.sweep.n_trials:
            return False
        trial = self.study.ask(distributions(self.sweep))
        if not self.claim(trial):
            return False
        trial.set_user_attr("driver", self.id)
        try:
            cfg = trial_config(self.sweep, self.base_abs, trial.params, trial.number)
        except ConfigError as e:
            self.tell(trial, TrialOutcome("failed", reason=str(e).removeprefix("config: ")))
            return True
        job = TrialJob(trial.number, cfg, self.sweep.study_name, self.sweep.storage_url,
                       self.sweep.config.pruner, self.sweep.config.objective, self.parent_run_id)
        self.pending[remote.remote(job)] = trial
        retry = trial.user_attrs.get("retry_of")
        self.echo(f"trial {trial.number} running  {format_params(trial.params)}"
                  + (f"  (retry of trial {retry})" if retry is not None else ""))
        return True

    def claim(self, trial) -> bool:
        """Two drivers may ask for the last trial at the same moment: the lower number keeps it, the other goes
        back to WAITING (its parameters kept), so no more than n_trials run."""
        s = self.states
        ahead = sum(t.number < trial.number for t in self.trials(s.COMPLETE, s.PRUNED, s.RUNNING, s.WAITING))
        if ahead < self.sweep.n_trials:
            return True
        self.store.put_back(trial.number)
        return False

    def finish(self, ref) -> None:
        import ray

        trial = self.pending.pop(ref)
        try:
            outcome = ray.get(ref)
        except Exception as e:  # the task itself died (worker lost, out of memory): the trial fails
            outcome = TrialOutcome("failed", reason=one_line(e))
        self.tell(trial, outcome)

    def tell(self, trial, outcome: TrialOutcome) -> None:
        from optuna.exceptions import UpdateFinishedTrialError

        attrs = {"client_rounds": outcome.client_rounds, "rounds": outcome.rounds,
                 "wall_seconds": round(outcome.wall_seconds, 2), "mlflow_run_id": outcome.mlflow_run_id}
        if outcome.state == "failed" or outcome.reason.startswith("diverged"):
            attrs["fail_reason"] = outcome.reason
        elif outcome.state == "pruned":
            attrs["pruned_reason"] = outcome.reason
        state = {"complete": self.states.COMPLETE, "pruned": self.states.PRUNED, "failed": self.states.FAIL}
        try:
            for key, value in attrs.items():
                trial.set_user_attr(key, value)
            self.study.tell(trial, outcome.value if outcome.state == "complete" else None,
                            state=state[outcome.state])
        except (UpdateFinishedTrialError, ValueError):
            self.echo(f"trial {trial.number} was already finished elsewhere (its driver was taken for gone)")
            return
        if outcome.state == "failed":
            self.failures.append(outcome.reason)
        tag_trial_run(self.sweep, outcome, trial.number)
        self.echo(self.progress_line(trial.number, outcome))

    def progress_line(self, number: int, outcome: TrialOutcome) -> str:
        metric = self.sweep.config.objective.spec
        if outcome.state == "complete":
            what = f"complete {metric} = {pct(outcome.value)}"
        else:
            what = f"{outcome.state:<8} {outcome.reason}"
        best = best_trial(self.study)
        best_text = f"best {pct(best.value)} (trial {best.number})" if best else "best -"
        return (f"trial {number} {what}  [{outcome.rounds} rounds, {outcome.wall_seconds:.0f} s]  {best_text}  "
                f"{self.done()}/{self.sweep.n_trials} done")

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        import ray

        remote = ray.remote(num_cpus=0, max_retries=0)(run_trial)
        self.heartbeat(force=True)
        self.recover_stale()
        try:
            while True:
                while len(self.pending) < self.parallel and self.launch(remote):
                    pass
                if not self.pending and self.done() >= self.sweep.n_trials:
                    return
                if len(self.failures) >= self.sweep.n_trials:
                    raise RunError(f"sweep {self.sweep.study_name}: {len(self.failures)} trials failed, the last with "
                                   f"{self.failures[-1]}; fix the sweep and run the same command to resume")
                ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=5.0) if self.pending else ([], [])
                if not ready and not self.pending:
                    time.sleep(2.0)  # other drivers' trials are running: wait for them, or for one to fail
                for ref in ready:
                    self.finish(ref)
                self.heartbeat()
                self.recover_stale()
        except BaseException:
            self.abandon_pending()
            raise

    def abandon_pending(self) -> None:
        """Stopped (Ctrl-C, an error): what was running fails now and is enqueued again for the next driver."""
        import ray

        for ref, trial in list(self.pending.items()):
            try:
                ray.cancel(ref, force=True)
            except Exception:  # Ray may be going down with us; the trial is failed and enqueued all the same
                pass
            self.fail_and_retry(self.store.get(trial.number),
                                "the sweep driver stopped while the trial ran; failed and enqueued again")
        self.pending.clear()


def _absolute(cfg: ExperimentConfig) -> ExperimentConfig:
    from pipelines.compare import absolute_paths

    return absolute_paths(cfg)


def best_trial(study):
    try:
        return study.best_trial
    except ValueError:  # no complete trial yet
        return None


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"


def format_params(params: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


# ------------------------------------------------------------------------------------------ MLflow
def tracker_for(sweep: Sweep):
    from orchestrator.tracking import Tracker

    cfg = _absolute(sweep.base)
    return Tracker(cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.enabled)


def start_parent_run(sweep: Sweep, study, created: bool):
    """One parent run per study: created by the driver that created the study, reused by any that join or
    resume (its id is a study user attribute)."""
    tracker = tracker_for(sweep)
    if not tracker.enabled:
        return tracker
    run_id = study.user_attrs.get(PARENT_RUN_ATTR)
    if run_id is None and not created and not study.trials:
        run_id = wait_for_parent_run(study)  # the creator is about to record it
    if run_id is not None:
        tracker.start("", {}, {}, resume_run_id=run_id)
        return tracker
    space = {f"space.{path}": json.dumps(p.model_dump(exclude_none=True)) for path, p in sweep.space.items()}
    params = {"study": sweep.study_name, "storage": redacted(sweep.storage_url), "n_trials": sweep.n_trials,
              "sampler": sweep.config.sampler.name, "pruner": sweep.config.pruner.name,
              "objective": sweep.config.objective.spec, "sweep_file": sweep.source, **space}
    tags = {"kind": "sweep", "optuna.study": sweep.study_name, "algorithm": sweep.base.algorithm.name,
            "dataset": sweep.base.data.dataset}
    tracker.start(f"sweep-{sweep.study_name}", params, tags)
    if tracker.run_id is not None:
        study.set_user_attr(PARENT_RUN_ATTR, tracker.run_id)
    return tracker


def wait_for_parent_run(study, seconds: float = 30.0) -> str | None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        run_id = study.user_attrs.get(PARENT_RUN_ATTR)
        if run_id is not None:
            return run_id
        time.sleep(0.5)
    return None


def tag_trial_run(sweep: Sweep, outcome: TrialOutcome, number: int) -> None:
    """Optuna's view of a trial on its nested MLflow run: number, state, value, reason."""
    if outcome.mlflow_run_id is None:
        return
    tracker = tracker_for(sweep)
    tracker.run_id = outcome.mlflow_run_id
    tags = {"optuna.study": sweep.study_name, "optuna.trial_number": number, "optuna.state": outcome.state}
    if outcome.reason:
        tags["optuna.reason"] = outcome.reason[:5000]
    tracker.set_tags(tags)
    if outcome.value is not None:
        tracker.log_metrics({"optuna.objective": outcome.value}, step=0)
        tracker.flush()  # the trial's run is not ended here (the run itself ended it)
    if outcome.state != "complete":
        tracker.end("KILLED" if outcome.state == "pruned" else "FAILED")


def trial_counts(sweep: Sweep, study) -> dict[str, float]:
    """The study's trials by state and this call's target: the parent run's progress, updated on every call."""
    from optuna.trial import TrialState

    counts = {f"trials_{s.name.lower()}": sum(t.state == s for t in study.trials) for s in TrialState}
    return counts | {"n_trials": sweep.n_trials}


def report_study(sweep: Sweep, study, tracker, out_dir: Path, echo) -> list[Path]:
    """trials.csv, the plots, report.html, the best parameters and config: in out_dir and on the parent run."""
    from pipelines.reports import write_study_report

    out_dir.mkdir(parents=True, exist_ok=True)
    plots = write_plots(study, out_dir, echo)
    outputs = [write_trials_csv(study, out_dir / "trials.csv"), *plots,
               write_study_report(study, sweep, plots, out_dir, tracker)]
    best = best_trial(study)
    if best is not None:
        (out_dir / "best_params.json").write_text(json.dumps(
            {"trial": best.number, "value": best.value, "params": best.params}, indent=1))
        (out_dir / "best_config.yaml").write_text(best_config(sweep, best).to_yaml())
        outputs += [out_dir / "best_params.json", out_dir / "best_config.yaml"]
    if tracker.run_id is None:
        return outputs
    metrics = trial_counts(sweep, study)
    if best is not None:
        metrics |= {"best_value": best.value, "best_trial": best.number}
        metrics |= {f"best.{k}": v for k, v in best.params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        tracker.set_tags({"best_trial": best.number, **{f"best.{k}": v for k, v in best.params.items()}})
    tracker.log_metrics(metrics, step=len(study.trials))
    for path in outputs:
        tracker.log_artifact(path)
    return outputs


def write_trials_csv(study, path: Path) -> Path:
    frame = study.trials_dataframe(attrs=("number", "state", "value", "params", "user_attrs", "datetime_start",
                                          "datetime_complete", "duration"))
    frame.to_csv(path, index=False)
    return path


def write_plots(study, out_dir: Path, echo) -> list[Path]:
    """Optuna's matplotlib plots as PNG; parameter importances need two complete trials."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    plots = {"optimization_history": ovm.plot_optimization_history, "parallel_coordinate": ovm.plot_parallel_coordinate}
    if len(complete) >= 2 and len({t.value for t in complete}) >= 2:
        plots["param_importances"] = ovm.plot_param_importances
    else:
        echo("parameter importances skipped: they need two complete trials with different values")
    written = []
    for name, plot in plots.items():
        try:
            with warnings.catch_warnings():  # e.g. a parameter with one value so far: a flat axis, and a warning
                warnings.simplefilter("ignore", UserWarning)
                ax = plot(study)
        except Exception as e:  # a plot Optuna cannot draw for this study is skipped, never the sweep
            echo(f"plot {name} skipped: {one_line(e)}")
            continue
        fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
        fig.set_size_inches(9, 5)
        fig.tight_layout()
        fig.savefig(out_dir / f"{name}.png", dpi=110)
        plt.close(fig)
        written.append(out_dir / f"{name}.png")
    return written


# ------------------------------------------------------------------------------------------ pipeline
def run_sweep(sweep: Sweep, *, address: str | None = None, echo=print) -> SweepResult:
    from orchestrator.run import ensure_ray
    from pipelines.compare import default_parallel

    storage_obj = open_storage(sweep.storage_url)
    study, created = open_study(sweep, storage_obj)
    if created:
        for params in sweep.config.enqueue:
            study.enqueue_trial(params)
    tracker = start_parent_run(sweep, study, created)
    try:
        ensure_ray(address)
    except RunError:
        tracker.end("FAILED")
        raise
    parallel = sweep.parallel or default_parallel(1, sweep.base.resources.cpus_per_actor)
    # n_trials is a param of the first call only (MLflow params never change): each call records its own
    tracker.set_tags({"n_trials": sweep.n_trials})
    tracker.log_summary(trial_counts(sweep, study), step=len(study.trials))
    driver = Driver(sweep, study, TrialStore(storage_obj, sweep.study_name), tracker.run_id, parallel, echo)
    c = driver.counts()
    echo(f"sweep {sweep.study_name}: {len(sweep.space)} parameters, {sweep.n_trials} trials, {parallel} at a time, "
         f"storage {redacted(sweep.storage_url)}"
         + (f"; resuming: {c['complete']} complete, {c['pruned']} pruned, {c['failed']} failed" if not created else ""))
    try:
        driver.run()
    except BaseException as e:
        tracker.end("KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED")
        raise
    outputs = report_study(sweep, study, tracker, local_dir(sweep.sweep_dir), echo)
    tracker.end("FINISHED")
    c = driver.counts()
    best = best_trial(study)
    return SweepResult(sweep.study_name, sweep.storage_url, c["complete"], c["pruned"], c["failed"],
                       best.number if best else None, best.value if best else None, best.params if best else {},
                       tracker.run_id, [str(p) for p in outputs])


def local_dir(path: str) -> Path:
    """The sweep's output directory, or a temporary one when it is on object storage (MLflow keeps them)."""
    return Path(tempfile.mkdtemp(prefix="mooring-sweep-")) if storage.is_remote(path) else Path(path)


# --------------------------------------------------------------------------------------------- best
def best_config(sweep: Sweep, trial) -> ExperimentConfig:
    return with_overrides(sweep.base, {**trial.params, "name": f"{sweep.study_name}-best"})


def load_best(sweep: Sweep):
    """(best trial, its ready-to-run config) of a finished or running study."""
    optuna = quiet_optuna()
    try:
        study = optuna.load_study(study_name=sweep.study_name, storage=open_storage(sweep.storage_url))
    except KeyError:
        raise RunError(f"no study {sweep.study_name!r} in {redacted(sweep.storage_url)}; run the sweep first") from None
    best = best_trial(study)
    if best is None:
        raise RunError(f"study {sweep.study_name!r} has no complete trial yet")
    return best, best_config(sweep, best)


def print_result(result: SweepResult, metric: str, out=None) -> None:
    out = out or sys.stdout  # looked up per call: a redirected or replaced stdout must be honoured
    print(f"study {result.study_name}: {result.complete} complete, {result.pruned} pruned, {result.failed} failed",
          file=out)
    if result.best_number is not None:
        print(f"best trial {result.best_number}: {metric} = {result.best_value:.6f} ({pct(result.best_value)})  "
              f"{format_params(result.best_params)}", file=out)
    if result.parent_run_id:
        print(f"MLflow parent run {result.parent_run_id}; browse with `mooring ui`", file=out)
