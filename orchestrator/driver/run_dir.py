"""The run directory: its name, its config (read back for a resume), metrics.jsonl, run.json, result.json,
and the checkpoint a resume starts from."""
from __future__ import annotations

import json
import math
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchestrator.driver import resume_config
from orchestrator.driver.run_errors import RunError
from orchestrator.experiment.config import ConfigError, ExperimentConfig, build_config
from orchestrator.io import checkpoint as ckpt
from orchestrator.io import storage
from orchestrator.io.output_lock import unwritable
from tasks.json_data import JsonProblem, parse_json


def new_run_dir(cfg: ExperimentConfig) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    return storage.join(cfg.checkpoint.dir, f"{cfg.name}-{cfg.algorithm.block_name}-s{cfg.seed}-{stamp}")


def read_run_config(run_dir: str, overrides: list[str]) -> ExperimentConfig:
    return build_config(*raw_run_config(run_dir, overrides))


def raw_run_config(run_dir: str, overrides: list[str]) -> tuple[dict[str, Any], str]:
    """A run directory's config.yaml with `overrides` applied, not yet validated, and its path."""
    from orchestrator.experiment.config import apply_overrides, parse_yaml_mapping

    path = storage.join(run_dir, "config.yaml")
    if not storage.exists(path):
        raise RunError(f"--resume {run_dir}: not a run directory (no config.yaml there)")
    try:
        text = storage.read_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    return apply_overrides(parse_yaml_mapping(text, path), overrides), path


def load_config_for_run(config_path: str | None, overrides: list[str], resume: str | None) -> ExperimentConfig:
    return build_config(*raw_config_for_run(config_path, overrides, resume))


def raw_config_for_run(config_path: str | None, overrides: list[str],
                       resume: str | None) -> tuple[dict[str, Any], str]:
    """The config file (or the resumed run's) read, with `overrides` applied, and its source: every error of the
    file and the overrides' syntax, in milliseconds; `build_config` then checks the values (importing torch and
    every model and algorithm, for their options)."""
    if resume:
        return raw_run_config(resume, overrides)
    if config_path is None:
        raise ConfigError("mooring run: give a CONFIG file (or --resume RUN_DIR)")
    from orchestrator.experiment.config import apply_overrides, read_yaml

    return apply_overrides(read_yaml(config_path), list(overrides)), str(config_path)


def check_output_dirs(cfg: ExperimentConfig) -> None:
    """checkpoint.dir and data.partitions_dir can be written (they, or their nearest existing parent, are
    writable directories), or one line naming the first that cannot; nothing is created."""
    for key, value in (("checkpoint.dir", cfg.checkpoint.dir), ("data.partitions_dir", cfg.data.partitions_dir)):
        if "://" in value:
            continue
        if (problem := unwritable(Path(value).absolute())) is not None:
            raise ConfigError(f"{key} = {value!r}: {problem}")


def code_version() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class RunLog:
    """What the run directory holds: the resolved config, metrics.jsonl, run.json, result.json."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir

    def write(self, name: str, text: str) -> None:
        storage.write_bytes_atomic(storage.join(self.run_dir, name), text.encode())

    def read_json(self, name: str) -> dict[str, Any]:
        """A JSON object the run wrote ({} if there is none); a damaged one is a RunError line naming it."""
        path = storage.join(self.run_dir, name)
        if not storage.exists(path):
            return {}
        try:
            record = parse_json(storage.read_bytes(path))
        except JsonProblem as e:
            record = e
        if not isinstance(record, dict):
            problem = record if isinstance(record, JsonProblem) else "not a JSON object"
            raise RunError(f"{path}: {problem}; it is the run's own record: restore it, or delete it to go on "
                           "without it (a resume then opens a new MLflow run)")
        return record

    def read_metrics(self) -> list[dict[str, Any]]:
        """metrics.jsonl's rounds; a damaged line is a RunError line naming the file and the line."""
        path = storage.join(self.run_dir, "metrics.jsonl")
        text = storage.read_bytes(path) if storage.exists(path) else b""
        return [metrics_line(path, number, line) for number, line in enumerate(text.splitlines(), start=1)
                if line.strip()]

    def check_records(self) -> None:
        """Refuse a resume whose run.json or metrics.jsonl is damaged, before anything starts."""
        self.read_json("run.json")
        self.read_metrics()

    def write_metrics(self, history: list[dict[str, Any]]) -> None:
        self.write("metrics.jsonl", "".join(map(metrics_jsonl_line, history)))


def metrics_line(path: str, number: int, line: bytes) -> dict[str, Any]:
    """One round's metrics as metrics.jsonl holds it: a JSON object with an integer `round`."""
    try:
        metrics = parse_json(line)
    except JsonProblem as e:
        metrics = e
    if not (isinstance(metrics, dict) and type(metrics.get("round")) is int):
        problem = metrics if isinstance(metrics, JsonProblem) else "not a round's metrics (an object with its round)"
        raise RunError(f"{path}: line {number}: {problem}; the checkpoint holds the history: delete the file (or the "
                       "line) to resume, the file is then written again from the checkpoint")
    return metrics


class MetricsFile:
    """metrics.jsonl, rewritten at most every `every_seconds` (and when forced: at checkpoints and at the end),
    not after every round: a short round would otherwise pay for rewriting the whole history each time. Each
    round's line is encoded once, when first written (a run's history only grows), so a rewrite costs its bytes,
    not the encoding of every round again."""

    def __init__(self, log: RunLog, every_seconds: float = 2.0):
        self.log, self.every_seconds = log, every_seconds
        self.lines: list[str] = []
        self.written, self.last = 0, time.monotonic()

    def update(self, history: list[dict[str, Any]], force: bool = False) -> None:
        if len(history) == self.written or not (force or time.monotonic() - self.last >= self.every_seconds):
            return
        if len(history) < len(self.lines):  # not the history these lines began
            self.lines = []
        self.lines += map(metrics_jsonl_line, history[len(self.lines):])
        self.log.write("metrics.jsonl", "".join(self.lines))
        self.written, self.last = len(history), time.monotonic()


def finite_or_none(value):
    """NaN and ±inf as None, recursively: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def metrics_jsonl_line(metrics: dict[str, Any]) -> str:
    """One round's line of metrics.jsonl."""
    return strict_json(metrics) + "\n"


def strict_json(obj, **kwargs) -> str:
    """Valid JSON (RFC 8259): a NaN or infinite metric is written as null, never as a bare NaN."""
    return json.dumps(finite_or_none(obj), allow_nan=False, **kwargs)


def resume_snapshot(run_dir: str, from_round: int | None, cfg: ExperimentConfig) -> dict[str, Any] | None:
    """The verified server snapshot a resume starts from (None: no checkpoint yet, start at round 0), of a round
    within cfg's train.rounds. Resuming from an earlier round makes it LATEST, which the client actors then load."""
    checkpoint = verified_checkpoint(run_dir, from_round)
    if checkpoint is None:
        return None
    snapshot = ckpt.load_server_snapshot(checkpoint)
    resume_config.check_rounds(run_dir, cfg, snapshot["round"])
    if from_round is not None:
        ckpt.mark_latest(run_dir, ckpt.checkpoint_name(from_round))
    return snapshot


def verified_checkpoint(run_dir: str, from_round: int | None) -> str | None:
    """The checkpoint a resume of `run_dir` starts from, every file of it verified (None: no checkpoint yet); a
    damaged one is one RunError line naming the file and the newest intact checkpoint."""
    try:
        return ckpt.checkpoint_to_resume(run_dir, from_round)
    except ckpt.CheckpointError as e:
        raise RunError(f"cannot resume: {e}") from None
