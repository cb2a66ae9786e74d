"""What both sides of the runtime read of a method beyond their own hooks: its name, its capabilities and its
per-process models (the base of `ClientAlgorithm` and `ServerAlgorithm`)."""
from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

from tasks.algorithms.capabilities import Capabilities
from tasks.models import FLModel
from tasks.types import State


@runtime_checkable
class MethodCore(Protocol):
    name: ClassVar[str]

    def capabilities(self) -> Capabilities: ...

    def working_model(self, state: State | None = None, key: Any = "global", device=None) -> FLModel: ...
