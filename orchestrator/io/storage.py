"""Paths that may be local or on any filesystem `pyarrow.fs` understands (s3://, gs://, hdfs://, file://).

Writes are atomic: to a temporary name beside the target, then a move, so a reader never sees half a file.
"""
from __future__ import annotations

import errno
import io
import os
import posixpath
import uuid
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow.fs as pafs


def _pafs():
    """pyarrow.fs, imported on first use: it takes a good part of a second, which `mooring run` spends in the
    background while Ray starts (see orchestrator/driver/run.py)."""
    import pyarrow.fs

    return pyarrow.fs


# the URI schemes pyarrow.fs.FileSystem.from_uri knows (pyarrow 17 to 25); anything else fails there, at run time
SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")


def unknown_scheme(uri: str) -> str | None:
    """Why `uri` names no filesystem Mooring can write to (None: a local path, or a scheme pyarrow.fs knows)."""
    if "://" not in uri:
        return None
    scheme = uri.partition("://")[0].lower()
    if scheme in SCHEMES:
        return None
    return f"no filesystem for {scheme}://; allowed: a local path or a URI of {', '.join(s + '://' for s in SCHEMES)}"


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" in uri:
        return _pafs().FileSystem.from_uri(uri)
    return _pafs().LocalFileSystem(), str(Path(uri).absolute())


def is_remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def join(base: str, *parts: str) -> str:
    return posixpath.join(base, *parts) if "://" in base else str(Path(base, *parts))


def parent(uri: str) -> str:
    return posixpath.dirname(uri.rstrip("/")) if "://" in uri else str(Path(uri).parent)


def exists(uri: str) -> bool:
    fs, path = resolve(uri)
    return fs.get_file_info(path).type != _pafs().FileType.NotFound


def read_bytes(uri: str) -> bytes:
    fs, path = resolve(uri)
    with fs.open_input_stream(path) as f:
        return f.read()


def read_buffer(uri: str):
    """The file's bytes in memory Arrow owns (a pyarrow.Buffer): for Arrow readers, which then hold no Python
    object (one held by Arrow's own threads can abort the process when they drop it while the interpreter exits)."""
    fs, path = resolve(uri)
    with fs.open_input_stream(path) as f:
        return f.read_buffer()


def write_bytes_atomic(uri: str, data) -> None:
    """Write `data` (bytes, or any buffer such as a pyarrow.Buffer) to `uri` whole or not at all: a failed write
    (a full disk) leaves no temporary file, and its OSError names `uri` (pyarrow's names no file)."""
    fs, path = resolve(uri)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        fs.create_dir(posixpath.dirname(path), recursive=True)
        with fs.open_output_stream(tmp) as f:
            f.write(data)
        fs.move(tmp, path)
    except BaseException as e:
        with suppress(OSError):
            fs.delete_file(tmp)
        if isinstance(e, OSError) and e.errno:
            raise OSError(e.errno, os.strerror(e.errno), uri) from None
        raise


def out_of_space(err: BaseException) -> OSError | None:
    """The full disk (or exhausted quota) behind `err`, raised here or in a Ray actor, if that is what it is."""
    cause = getattr(err, "cause", None)  # a Ray task's error carries the actor's exception
    if isinstance(cause, BaseException) and cause is not err:
        return out_of_space(cause)
    return err if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT) else None


def list_dir(uri: str) -> list[str]:
    fs, path = resolve(uri)
    if fs.get_file_info(path).type == _pafs().FileType.NotFound:
        return []
    return sorted(info.base_name for info in fs.get_file_info(_pafs().FileSelector(path)))


def torch_bytes(obj) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def torch_load_safe(data: bytes):
    """Load tensors and plain containers only: `weights_only=True` refuses to run pickled code."""
    import warnings

    import torch

    with warnings.catch_warnings():  # torch warns about foreign pickle protocols before refusing them
        warnings.simplefilter("ignore")
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def delete_file(uri: str) -> None:
    """Delete a file (nothing if it is not there)."""
    fs, path = resolve(uri)
    if fs.get_file_info(path).type != _pafs().FileType.NotFound:
        fs.delete_file(path)


def digest(data: bytes) -> dict[str, int | str]:
    """What a manifest records of a file: its size and sha256."""
    import hashlib

    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def remove_tree(uri: str) -> None:
    """Delete a directory and everything under it (nothing if it is not there)."""
    fs, path = resolve(uri)
    if fs.get_file_info(path).type != _pafs().FileType.NotFound:
        fs.delete_dir(path)


def can_write_in(directory: Path) -> OSError | None:
    """Whether a file can be created in the local `directory`: None, or the error creating one gave. The probe
    file is named per process and thread (two may check at once) and removed."""
    import threading

    probe = directory / f".mooring-write-test-{os.getpid()}-{threading.get_ident()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        return e
    return None
