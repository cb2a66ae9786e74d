"""One process at a time creates a database's schema: MLflow's tracking store and Optuna's storage.

Both create their tables (and run their migrations) the first time a process opens a new database, and
neither does it atomically: two processes opening the same new store at once both issue CREATE TABLE,
and one fails (SQLite: "table _alembic_tmp_metrics already exists", leaving the store half-migrated;
PostgreSQL: UniqueViolation on pg_type). `schema_lock(url)` serialises that step across processes:
  - SQLite: an exclusive `flock` on a file beside the database (`<file>.lock`);
  - PostgreSQL: a session-level advisory lock (`pg_advisory_lock`), which the server scopes to the database
    and releases if the holder dies;
  - anything else (an HTTP tracking server, which migrates its own store): no lock.
Whoever comes second finds the schema in place, and the open is a no-op check.
"""
from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def advisory_key(purpose: str) -> int:
    """A stable 32-bit key per purpose ("mlflow", "optuna"): two purposes never wait for each other."""
    return zlib.crc32(f"mooring-schema-{purpose}".encode())


def sqlite_file(url: str) -> Path | None:
    """The database file of a sqlite:/// URL; None for an in-memory database or another scheme."""
    if not url.startswith("sqlite:///"):
        return None
    path = url.removeprefix("sqlite:///").split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return Path(path)


@contextmanager
def schema_lock(url: str, purpose: str) -> Iterator[None]:
    if (db := sqlite_file(url)) is not None:
        with _file_lock(db.with_name(db.name + ".lock")):
            yield
    elif url.startswith(("postgresql", "postgres:")):
        with _advisory_lock(url, advisory_key(purpose)):
            yield
    else:
        yield


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def _advisory_lock(url: str, key: int) -> Iterator[None]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
    finally:
        engine.dispose()
