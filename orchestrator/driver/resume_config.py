"""What a resume must keep: the config a run was started with. The run's config.yaml is the user's to read (and
edit); a copy of what it resolved to is kept in checkpoints/config.json when the run starts, and a resume whose
config (config.yaml with any --set) computes something else is refused, naming the keys that changed. Without
this a changed model made every client fail every round, and a changed partition silently mixed two in one
history.

A resume may change how and where the run executes, not what it computes: the rounds to run (to extend it),
the resources and engine, the tracking store, the checkpoint interval and directory, where the data lives.
"""
from __future__ import annotations

import json
from typing import Any

from orchestrator.experiment.config import ConfigError, ExperimentConfig, flatten
from orchestrator.io import storage
from orchestrator.io.checkpoint import checkpoints_dir

STARTED_WITH = "config.json"
MAY_CHANGE = ("name", "train.rounds", "train.engine", "train.on_nonfinite_loss", "eval.batch_size", "resources",
              "tracking", "checkpoint", "data.partitions_dir", "data.root", "data.download", "claims")
SHOWN = 6  # changed keys named in the refusal; the rest counted


def comparable(cfg: ExperimentConfig) -> dict[str, Any]:
    """The config as dotted keys and JSON values, the model's options and the named algorithm's hyperparameters
    resolved to their defaults (the other algorithms' blocks play no part in the run)."""
    from tasks.models import MODELS

    d = cfg.to_dict()
    model_options = MODELS.get(cfg.model.name).params(**cfg.model.options).model_dump(mode="json")
    d["model"] = {k: v for k, v in d["model"].items() if k not in model_options} | model_options
    shared = {k: v for k in ("averaging", "server_optimizer", "calibration", "aggregator")
              if (v := d["algorithm"].get(k)) is not None}
    d["algorithm"] = {"name": cfg.algorithm.name,
                      cfg.algorithm.block_name: cfg.algorithm.params_for().model_dump(mode="json"), **shared}
    flat = flatten(d)
    # a block set on one side only leaves keys the other lacks, which `changes` does not count: its name, on both
    aggregator = cfg.algorithm.aggregator
    flat["threat"] = cfg.threat.attack if cfg.threat is not None else None
    flat["algorithm.aggregator"] = aggregator.name if aggregator is not None else None
    return json.loads(json.dumps(flat))


def record(run_dir: str, cfg: ExperimentConfig) -> None:
    storage.write_bytes_atomic(_path(run_dir), json.dumps({"config": comparable(cfg)}, indent=1).encode())


def check_unchanged(run_dir: str, cfg: ExperimentConfig) -> None:
    """ConfigError in one line if `cfg` computes something else than the config `run_dir` was started with
    (a run from before this record is not checked)."""
    path = _path(run_dir)
    if not storage.exists(path):
        return
    try:
        started = json.loads(storage.read_bytes(path))["config"]
    except (ValueError, KeyError, TypeError):
        started = None
    if not isinstance(started, dict):
        raise ConfigError(f"{path}: not a record of the config the run was started with, so a resume cannot "
                          "check its config: start a new run")
    changed = changes(started, comparable(cfg))
    if changed:
        shown = ", ".join(changed[:SHOWN]) + (f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else "")
        raise ConfigError(f"--resume {run_dir}: its config.yaml (with any --set) differs from the config the run "
                          f"was started with: {shown}; resume with the original config or start a new run")


def check_rounds(run_dir: str, cfg: ExperimentConfig, done: int) -> None:
    if cfg.train.rounds < done:
        raise ConfigError(f"--resume {run_dir}: train.rounds = {cfg.train.rounds}, but the run's checkpoint is of "
                          f"round {done}; train.rounds may grow on a resume, not shrink below the rounds done")


def changes(started: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """'key old → new' for each key that differs and may not change on a resume, in the config's order. Both
    sides have every default resolved, so a key only one has comes from another version of Mooring (an option
    added or removed since) and is not a change; the model or algorithm that has it differs by name anyway."""
    return [f"{k} {json.dumps(started[k])} → {json.dumps(now[k])}" for k in started
            if k in now and not _may_change(k) and started[k] != now[k]]


def _may_change(key: str) -> bool:
    return any(key == p or key.startswith(p + ".") for p in MAY_CHANGE)


def _path(run_dir: str) -> str:
    return storage.join(checkpoints_dir(run_dir), STARTED_WITH)
