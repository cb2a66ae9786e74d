"""The one exception the Python API raises for bad input and failed runs: the command line's one-line message,
without a traceback through Mooring's internals."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class MooringError(Exception):
    """What `mooring run` or `mooring compare` would print after `error:` (or `interrupted:`), as one line.
    `kind` names the error the runtime raised (ConfigError, RunError, DatasetNotFound, OSError, ...)."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind

    def _render_traceback_(self) -> list[str]:
        """IPython and Jupyter show an exception through this when it has one: the message alone."""
        return [f"MooringError: {self}"]


@contextmanager
def one_line_errors() -> Iterator[None]:
    """The command line's known errors (orchestrator/cli.py) re-raised as MooringError with the same line."""
    from orchestrator.cli import io_problem, known_errors
    from orchestrator.driver.signals import RunInterrupted

    try:
        yield
    except OSError as e:
        raise MooringError(io_problem(e), type(e).__name__) from None
    except Exception as e:
        if not isinstance(e, known_errors()):
            raise
        prefix = "interrupted: " if isinstance(e, RunInterrupted) else ""
        raise MooringError(f"{prefix}{e}", type(e).__name__) from None
