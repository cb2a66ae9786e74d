"""One command at a time in an output directory (`compare --out`, `table`'s and `claims`' `--results`), and
output paths checked before anything runs.

Two comparisons into one directory would each write every file, each believing its own tables saved, and the
last to finish would leave its variants alone there. A command that writes such a directory holds an exclusive
`flock` on DIR/.lock (run_lock's mechanism) from before its first run until it has written its last file; a
second is refused at once in one line naming the holder (pid, host and command line), and writes nothing. The
kernel releases the lock when its holder exits, however it exits: a lock file left by a process that has ended
never blocks. A directory the command created and left with nothing but its lock is removed again, as a
comparison that finished no run writes no table.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.io.run_lock import LOCK_NAME, try_lock, write_holder

# the lock file a holder removes as it ends may be opened by another command just before: that one then holds
# a lock on a file no longer there, sees it, and opens the new one; this many times at most
OPEN_TRIES = 5


def check_output_dir(path: str | Path, option: str) -> None:
    """`path` can be an output directory: it is one, or it can be made (its nearest existing parent is a
    directory this process can write in); else one ConfigError line starting with `option` and the path.
    Nothing is created."""
    target = Path(path).absolute()
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{option} {path}: a file, not a directory; give a directory to write the results in")
    if (problem := unwritable(target)) is not None:
        raise ConfigError(f"{option} {path}: {problem}")


def check_report_file(path: str | Path, option: str) -> None:
    """`path` can be written as a file whose missing parents are made: not a directory, and its nearest existing
    parent a directory this process can write in; else one ConfigError line."""
    target = Path(path).absolute()
    if target.is_dir():
        raise ConfigError(f"{option} {path}: a directory; give the path of a file to write the report to")
    if target.exists() and not os.access(target, os.W_OK):
        raise ConfigError(f"{option} {path}: the file exists and cannot be written")
    if (problem := unwritable(target.parent)) is not None:
        raise ConfigError(f"{option} {path}: {problem}")


def unwritable(directory: Path) -> str | None:
    """Why `directory` cannot be written in or made (its nearest existing parent a file, or not writable), or None."""
    from orchestrator.io.storage import can_write_in

    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a directory"
    if (e := can_write_in(existing)) is not None:
        return f"cannot write in {existing} ({e.strerror or e})"
    return None


@contextmanager
def holding_output(path: str | Path, option: str) -> Iterator[None]:
    """Hold the output directory `path` (made if needed) for the life of the block, or a ConfigError line naming
    its holder. A path given as a URI (s3://, ...) is not locked: such stores have no such lock."""
    if "://" in str(path):
        yield
        return
    directory = Path(path).absolute()
    made = missing_parents(directory)
    fd = _open_locked(directory, path, option)
    try:
        write_holder(fd, command_line())
        yield
    finally:
        if made:
            _remove_if_empty(directory, made[-1])
        os.close(fd)


def _open_locked(directory: Path, path: str | Path, option: str) -> int:
    """The lock file's descriptor, locked: the file that is the directory's lock now."""
    lock = directory / LOCK_NAME
    for _ in range(OPEN_TRIES):
        directory.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes
        except FileNotFoundError:  # the directory removed meanwhile by a holder that ended
            continue
        holder = try_lock(fd)
        if holder is not None:
            os.close(fd)
            raise ConfigError(f"{option} {path}: in use by another command ({holder}); wait for it to end, or "
                              f"give another {option}")
        if _is_file_at(fd, lock):
            return fd
        os.close(fd)
    raise ConfigError(f"{option} {path}: its lock file was removed {OPEN_TRIES} times as it was taken; another "
                      "command is using the directory: wait for it to end, or give another")


def _is_file_at(fd: int, path: Path) -> bool:
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)


def missing_parents(directory: Path) -> list[Path]:
    """`directory` and those of its parents that do not exist yet, innermost first."""
    missing = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    return missing


def _remove_if_empty(directory: Path, top: Path) -> None:
    """While the lock is held: the lock file and the directory removed when nothing else is in it, and its
    parents up to `top` (those this command made) while they are empty."""
    with suppress(OSError):
        if [p.name for p in directory.iterdir()] != [LOCK_NAME]:
            return
        (directory / LOCK_NAME).unlink()
        while True:
            directory.rmdir()
            if directory == top:
                return
            directory = directory.parent


def command_line() -> str:
    """This process's command line, on one line, for a refusal to name (shortened past 200 characters); a URL's
    password (`--set tracking.uri=postgresql://user:secret@host/db`) is not written into the lock file."""
    words = [Path(sys.argv[0]).name, *sys.argv[1:]] if sys.argv and sys.argv[0] else sys.argv[1:]
    text = " ".join(shlex.join(words).split())  # no newline from an argument
    text = re.sub(r"(://[^/@:\s]*):[^/@\s]*@", r"\1:***@", text)
    return text if len(text) <= 200 else text[:199] + "…"
