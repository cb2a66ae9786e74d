"""One process at a time in a run directory: a run holds an exclusive `flock` on RUN_DIR/.lock from before it
reads its checkpoint until it ends, so a second `mooring run --resume` of the same directory is refused instead
of running the same rounds twice into one history and one MLflow run. The kernel releases the lock when the
holder exits, however it exits (SIGKILL included): there is no stale lock to clean up. The file holds the
holder's pid and host, for the refusal to name. A run directory given as a URI (s3://, gs://, ...) is not
locked: such stores have no such lock.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

LOCK_NAME = ".lock"


class RunDirInUse(Exception):
    """Another process holds the run directory; the message is one line naming it."""


@contextmanager
def holding(run_dir: str) -> Iterator[None]:
    """Hold `run_dir`'s lock (creating the directory if needed) for the life of the block."""
    if "://" in run_dir:
        yield
        return
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    fd = os.open(Path(run_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes
    try:
        _lock(fd, run_dir)
        write_holder(fd)
        yield
    finally:
        os.close(fd)


def _lock(fd: int, run_dir: str) -> None:
    holder = try_lock(fd)
    if holder is not None:
        raise RunDirInUse(f"{run_dir} is in use by another run ({holder}); wait for it to end, or stop it "
                          "(SIGINT or SIGTERM checkpoints it) and resume then")


def try_lock(fd: int) -> str | None:
    """Take the exclusive lock on `fd` without waiting: None once taken, else the holder's line from the file."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.pread(fd, 1000, 0).decode(errors="replace").strip().split("\n")[0] or "another process"
    return None


def write_holder(fd: int, command: str | None = None) -> None:
    """Only informative (the lock itself is the flock): not written on a full disk is no failure."""
    with suppress(OSError):
        os.ftruncate(fd, 0)
        what = f": {command}" if command else ""
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}{what}\n".encode(), 0)
