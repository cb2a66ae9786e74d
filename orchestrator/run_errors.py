"""A run's failures as one line each for the user: what went wrong, and how to go on (resume or start again)."""
from __future__ import annotations

from orchestrator import checkpoint as ckpt
from orchestrator import storage


class RunError(Exception):
    """A run could not start or continue; the message is one line for the user."""


def remote_error(err: Exception) -> str:
    """A Ray task's failure as one line: the original exception's type and first line."""
    import ray

    cause = err.cause if isinstance(err, ray.exceptions.RayTaskError) and err.cause is not None else err
    while isinstance(cause, ray.exceptions.RayTaskError) and cause.cause is not None:
        cause = cause.cause
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0][:200]}" if text else type(cause).__name__


def disk_full(run_dir: str, err: BaseException) -> RunError | None:
    """A full disk (or quota) as one line naming the file and the way on, if that is what `err` is."""
    full = storage.out_of_space(err)
    if full is None:
        return None
    then = (f"continue with `mooring run --resume {run_dir}`" if storage.exists(storage.join(run_dir, "config.yaml"))
            else "start the run again")  # a run that failed in set-up left no directory
    return RunError(f"{full.filename or run_dir}: {full.strerror or 'no space left'}; free space there, then {then}")


def resume_hint(run_dir: str) -> str:
    latest = ckpt.latest_checkpoint(run_dir)
    if latest is None:
        return "no checkpoint was written; start the run again"
    return f"the last checkpoint is {latest}; continue with `mooring run --resume {run_dir}`"


def coordinator_lost(run_dir: str, rounds_done: int, err: Exception) -> str:
    latest = ckpt.latest_checkpoint(run_dir)
    where = f"its last checkpoint is {latest}; continue with `mooring run --resume {run_dir}`" if latest else \
        "no checkpoint was written yet; start the run again"
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"the coordinator died after round {rounds_done} ({first[:160]}); {where}"
