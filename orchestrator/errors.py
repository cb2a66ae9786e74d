"""The errors every layer of the runtime raises for the user, each already one line, and the exit codes the command
line ends with: `ConfigError` for bad input (exit 2), `RunError` for a run that could not start or go on (exit 1)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # tasks.algorithms imports torch and every method: not on `mooring run`'s path to Ray's start
    from tasks.algorithms.faults import MethodFault

USAGE_ERROR = 2
RUN_ERROR = 1


class ConfigError(Exception):
    """A config problem, already phrased as one line: what, where, what is allowed."""


class RunError(Exception):
    """A run could not start or continue; the message is one line for the user (a method's fault adds its
    traceback's last frames below it). `details`: what result.json and MLflow record of it."""

    def __init__(self, message: str, fault: MethodFault | None = None):
        super().__init__(message)
        self.fault = fault

    @property
    def details(self) -> dict[str, Any]:
        return {"message": str(self).splitlines()[0], **({"method_fault": self.fault.to_json()} if self.fault else {})}
