"""The Optuna objects a sweep uses: its RDB storage, sampler, pruner and study."""
from __future__ import annotations

import os
import warnings
from typing import Any

from orchestrator.experiment.config import (
    ConfigError,
)
from pipelines.sweep_config import (
    GridSampler,
    MedianPruner,
    RandomSampler,
    SuccessiveHalvingPruner,
)
from pipelines.sweep_file import Sweep, redacted
from pipelines.sweep_objective import study_direction

SWEEP_ATTR = "mooring:sweep"  # the study's user attribute: the fingerprint of the sweep that made it


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
    from orchestrator.io.schema_lock import schema_lock

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
    direction = study_direction(sweep.config.objective)
    try:
        study = optuna.create_study(study_name=sweep.study_name, storage=storage_obj, direction=direction,
                                    sampler=build_sampler(sweep, sweep.config.sampler.seed), pruner=pruner)
        study.set_user_attr(SWEEP_ATTR, sweep.fingerprint)
        return study, True
    except optuna.exceptions.DuplicatedStudyError:
        pass
    known = len(optuna.load_study(study_name=sweep.study_name, storage=storage_obj).trials)
    # joining or resuming: another seed, so this driver does not propose the points already proposed
    seed = sweep.config.sampler.seed + 7919 * known + os.getpid() % 7919
    study = optuna.load_study(study_name=sweep.study_name, storage=storage_obj,
                              sampler=build_sampler(sweep, seed), pruner=pruner)
    if study.direction != direction:
        raise ConfigError(f"--study {sweep.study_name}: that study's direction is {study.direction.name.lower()}; "
                          f"this sweep's objective.direction is {sweep.config.objective.direction.value}")
    made_by = study.user_attrs.get(SWEEP_ATTR)
    if made_by is None:  # a study made elsewhere (by hand, or put back from a record): this sweep's from now on
        study.set_user_attr(SWEEP_ATTR, sweep.fingerprint)
    elif made_by != sweep.fingerprint:
        raise ConfigError(f"--study {sweep.study_name}: that study's trials ran another sweep (its base config, "
                          "--set, ranges or objective differ from this one's), and resuming it would mix the two "
                          "searches: give this sweep a study of its own (--study NAME) or run the sweep as it was")
    return study, False



def best_trial(study):
    try:
        return study.best_trial
    except ValueError:  # no complete trial yet
        return None
