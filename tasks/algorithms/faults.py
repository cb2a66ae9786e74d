"""A method's own bug, told apart from the runtime's faults: an exception raised in one of the method's hooks (or
a hook's result the runtime cannot take) becomes a `MethodError` naming the method, the hook, the client and
round, and the traceback's last frames. The runtime stops the run on it (orchestrator/driver/run.py), where a lost
actor is retried and a full disk is an I/O error: neither is the method's.

Whether a failure is the method's is read from its traceback: it passed through a hook (an `Algorithm` method
such as `aggregate` or `local_loss`) as the method's class or one of its bases defines it. So Mooring's own code
failing around a hook (the privacy layer's `payload`, a client state's write) is not blamed on the method."""
from __future__ import annotations

import inspect
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tasks.algorithms.base import Algorithm
from tasks.algorithms.hook_results import BadHookResult

FRAMES_SHOWN = 4  # the traceback's last frames a MethodError shows


@dataclass(frozen=True)
class MethodFault:
    """What went wrong in a method: `round` is 1-based (0: the set-up exchange), `clients` the clients whose call
    raised (none: the server's hook), `error` the exception's type and first line (or, `returned`, what the hook
    returned and what is allowed), `frames` the traceback's last frames, innermost last, each "file:line in
    function: code"."""

    method: str
    hook: str
    round: int
    error: str
    clients: tuple[int, ...] = ()
    frames: tuple[str, ...] = field(default_factory=tuple)
    returned: bool = False

    @property
    def headline(self) -> str:
        where = "the server" if not self.clients else (
            f"client {self.clients[0]}" if len(self.clients) == 1 else f"clients {', '.join(map(str, self.clients))}")
        when = "the set-up exchange" if self.round == 0 else f"round {self.round}"
        what = self.error if self.returned else f"{self.hook} raised {self.error}"
        return f"{self.method}'s {what} ({where}, {when})"

    def describe(self) -> str:
        """The headline, then the frames, one a line."""
        return "\n".join([self.headline, *(f"  at {frame}" for frame in self.frames)])

    def to_json(self) -> dict:
        return {"method": self.method, "hook": self.hook, "round": self.round, "clients": list(self.clients),
                "error": self.error, "frames": list(self.frames), "returned": self.returned}


class MethodError(Exception):
    """A method's own bug (see the module's docstring); str() is `MethodFault.describe`."""

    def __init__(self, fault: MethodFault):
        super().__init__(fault.describe())
        self.fault = fault

    def __reduce__(self):  # through Ray: the fault, not the message
        return MethodError, (self.fault,)


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300]}" if text else type(err).__name__


def hook_frames(algorithm_class: type) -> set[tuple[str, str]]:
    """(file, function) of every hook of `Algorithm` (its client side's and its server side's too) as
    `algorithm_class` or one of its bases defines it."""
    hooks = {name for side in Algorithm.__mro__ for name, value in vars(side).items()
             if callable(value) and not name.startswith("_")}
    out = set()
    for cls in algorithm_class.__mro__:
        for name in hooks & set(vars(cls)):
            code = getattr(inspect.unwrap(getattr(vars(cls)[name], "__func__", vars(cls)[name])), "__code__", None)
            if code is not None:  # as a traceback names it (a relative path stays relative)
                out.add((code.co_filename, name))
    return out


def method_fault(err: Exception, algorithm, round_idx: int, clients) -> MethodFault | None:
    """The method's fault behind `err`, raised in round `round_idx` (0-based; -1: the set-up exchange) while the
    runtime called `algorithm` for `clients` (none: the server); None where the traceback passes through none of
    the method's hooks (not the method's fault)."""
    if isinstance(err, BadHookResult):  # what the hook returned: no frame of the method's behind it
        return MethodFault(algorithm.name, err.hook, round_idx + 1, str(err), tuple(clients), returned=True)
    frames = traceback.extract_tb(err.__traceback__)
    defined = hook_frames(type(algorithm))
    named = next((f.name for f in reversed(frames) if (f.filename, f.name) in defined), None)
    if named is None:
        return None
    shown = tuple(f"{f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}" for f in frames[-FRAMES_SHOWN:])
    return MethodFault(algorithm.name, named, round_idx + 1, one_line(err), tuple(clients), shown)


@contextmanager
def method_hook(algorithm, round_idx: int, clients=()) -> Iterator[None]:
    """Around the runtime's calls of `algorithm`'s hooks for `clients` (none: the server's) in round `round_idx`
    (0-based; -1: the set-up exchange): an exception that is the method's fault leaves as a MethodError."""
    try:
        yield
    except MethodError:
        raise
    except Exception as err:
        fault = method_fault(err, algorithm, round_idx, clients)
        if fault is None:
            raise
        raise MethodError(fault) from err
