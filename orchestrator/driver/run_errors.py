"""A run's failures as one line each for the user: what went wrong, and how to go on (resume or start again); a
method's own bug as that line and the traceback's last frames."""
from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.errors import RunError
from orchestrator.io import checkpoint as ckpt
from orchestrator.io import storage

if TYPE_CHECKING:  # tasks.algorithms imports torch and every method: not on `mooring run`'s path to Ray's start
    from tasks.algorithms.faults import MethodFault


def method_fault(err: BaseException) -> MethodFault | None:
    """The method's fault behind `err`, raised here or in a Ray actor (through each actor that passed it on)."""
    from tasks.algorithms.faults import MethodError

    while err is not None:
        if isinstance(err, MethodError) and hasattr(err, "fault"):  # Ray's copy of the class lacks the fault
            return err.fault
        err = getattr(err, "cause", None)
    return None


def failed(what: str, err: BaseException, then: str) -> RunError:
    """`what` failed because of `err`, then how to go on: a method's own bug as its hook, client and round, the
    way on once it is fixed, and the traceback's last frames below; anything else in one line."""
    fault = method_fault(err)
    if fault is None:
        return RunError(f"{what}: {remote_error(err)}; {then}")
    frames = "".join(f"\n  at {frame}" for frame in fault.frames)
    return RunError(f"{what}: {fault.headline}; once the method is fixed: {then}{frames}", fault)


def remote_error(err: Exception) -> str:
    """A coordinator call's failure (a Ray task's, or a local coordinator's: orchestrator/driver/
    local_coordinator.py) as one line: the original exception's type and first line."""
    cause = err
    while isinstance(getattr(cause, "cause", None), BaseException) and is_call_failure(cause):
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


class CoordinatorCallError(Exception):
    """A call of the coordinator in the driver's process (orchestrator/driver/local_coordinator.py) that failed,
    carrying the original exception as `cause` as Ray's RayTaskError does, so the driver reports both alike."""

    def __init__(self, cause: BaseException):
        super().__init__(str(cause))
        self.cause = cause


def is_call_failure(err: BaseException) -> bool:
    """Whether `err` wraps a coordinator call's exception as its `cause`: Ray's RayTaskError, or a local call's."""
    return isinstance(err, (CoordinatorCallError, ray_exception("RayTaskError")))


class _NeverRaised(Exception):
    """Stands for Ray's exception classes where this process never imported Ray (nothing raises them)."""


def ray_exception(name: str) -> type[BaseException]:
    """ray.exceptions.`name`, without importing Ray into a process that runs without it."""
    import sys

    if "ray" not in sys.modules:
        return _NeverRaised
    import ray

    return getattr(ray.exceptions, name)
