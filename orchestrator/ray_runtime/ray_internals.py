"""Every use of Ray's private names, in one place, each checked before it is used.

Three pieces, applied only around the start of a local Ray instance by this process (orchestrator/driver/run.py,
init_ray):

    lean_start()        no dashboard server, no dashboard modules in the node agent, no autoscaler monitor
    loopback_only()     the instance's servers bound to 127.0.0.1
    enable_token_auth() Ray's token authentication switched on, as Ray itself does for a new local instance

Each piece first checks that the names it needs are there, in the shape it expects (callable, taking the
parameters Ray passes them, returning what the replacement returns). Where one cannot apply to the installed
Ray, it logs one line, once per process, naming what is skipped, the Ray version and what follows from it,
changes nothing, and Ray starts as it would without it. The versions these names were tried on are the bounds
on ray in pyproject.toml.

Each check takes what it inspects as an argument (the module or class holding the names), so that it can be
shown what a Ray without them looks like.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import logging
import os
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)
_warned: set[str] = set()

RETURNS_NOTHING = "nothing"
_INHERITED = object()  # a swapped name that its owner inherits: deleted again, not set, afterwards


@dataclass(frozen=True)
class Swap:
    """`owner.name` replaced by `replacement` while a piece applies."""

    owner: Any                       # the module or class holding the name
    name: str
    replacement: Callable[..., Any]
    params: tuple[str, ...] = ()     # parameters Ray passes the original, which the replacement accepts too
    returns: str = RETURNS_NOTHING   # "nothing", or a type name the original's return annotation must name

    @property
    def where(self) -> str:
        owner = self.owner
        if isinstance(owner, ModuleType):
            return f"{owner.__name__}.{self.name}"
        if isinstance(owner, type):
            return f"{owner.__module__}.{owner.__qualname__}.{self.name}"
        return f"{type(owner).__name__}.{self.name}"


def ray_version() -> str:
    try:
        import ray

        return f"Ray {ray.__version__}"
    except ImportError:
        return "Ray (not importable)"


def skip(piece: str, problem: str, consequence: str) -> None:
    """One line per process and problem: what is skipped, on which Ray, why, and what follows."""
    message = f"{ray_version()}: {piece} skipped ({problem}); {consequence}"
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


# ------------------------------------------------------------------------------------ swapping names
def swap_problem(swap: Swap) -> str | None:
    """Why `swap` cannot apply to what its owner holds now, or None when it can."""
    original = getattr(swap.owner, swap.name, None)
    if original is None:
        return f"{swap.where} not found"
    if not callable(original):
        return f"{swap.where} is not callable"
    try:
        params = inspect.signature(original).parameters
    except (TypeError, ValueError):
        return f"{swap.where} has no signature to check"
    missing = [p for p in swap.params if p not in params]
    if missing:
        return f"{swap.where} takes no {', '.join(missing)}"
    return return_problem(swap, original)


def return_problem(swap: Swap, original: Callable[..., Any]) -> str | None:
    """The replacement must return what the original does: nothing, or a value of the annotated type."""
    if swap.returns != RETURNS_NOTHING:
        annotation = inspect.signature(original).return_annotation  # a string under postponed annotations
        return None if swap.returns in str(annotation) else f"{swap.where} is not annotated to return {swap.returns}"
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(original)))
    except (OSError, TypeError, SyntaxError):
        return f"{swap.where}: its source cannot be read to check that it returns nothing"
    if any(isinstance(node, ast.Return) and node.value is not None for node in ast.walk(tree)):
        return f"{swap.where} now returns a value"
    return None


@contextmanager
def swapped(swaps: list[Swap], piece: str, consequence: str) -> Iterator[bool]:
    """All of `swaps` applied inside, or, where any one cannot apply, none of them (one line says so).
    Yields whether they were applied."""
    problems = [problem for swap in swaps if (problem := swap_problem(swap))]
    if problems:
        skip(piece, "; ".join(problems), consequence)
        yield False
        return
    saved = [(swap.owner, swap.name, vars(swap.owner).get(swap.name, _INHERITED)) for swap in swaps]
    for swap in swaps:
        setattr(swap.owner, swap.name, swap.replacement)
    try:
        yield True
    finally:
        for owner, name, original in saved:
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


# ------------------------------------------------------------------------------------------ the pieces
def lean_swaps(node_class: type, utils: ModuleType) -> list[Swap]:
    """Ray's include_dashboard=False still starts the dashboard's server (for usage statistics) and waits for
    it; the node agent's dashboard modules (metrics, logs and jobs over HTTP), which the raylet waits for
    before the node is up; and the autoscaler's monitor. Each is a Python process importing aiohttp, gRPC and
    OpenTelemetry: seconds of CPU on the path to the first actor (benchmarks/README.md, "Whole run"). With
    these swaps Ray starts no dashboard server (its URL stays None, as for a head without one), runs its agent
    as in a minimal install, and starts no monitor."""
    return [
        Swap(node_class, "start_api_server", lambda self, **kwargs: None, ("include_dashboard", "raise_on_failure")),
        Swap(node_class, "start_monitor", lambda self: None),
        Swap(utils, "get_dashboard_dependency_error", lambda: ImportError("not needed by this local instance"),
             returns="ImportError"),
    ]


@contextmanager
def lean_start(node_class: type | None = None, utils: ModuleType | None = None) -> Iterator[bool]:
    """A local instance started inside starts lean (lean_swaps); a Ray without these names starts as usual."""
    if node_class is None or utils is None:
        import ray._private.node
        import ray._private.utils

        node_class, utils = ray._private.node.Node, ray._private.utils
    with swapped(lean_swaps(node_class, utils), "lean start-up",
                 "Ray starts its dashboard and autoscaler as usual (seconds more CPU at start-up)") as applied:
        yield applied


def loopback_problem(constants: Any) -> str | None:
    env_var = getattr(constants, "ENABLE_RAY_CLUSTERS_ENV_VAR", None)
    if not isinstance(env_var, str):
        return "ray._private.ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR not found or not a string"
    if not isinstance(getattr(constants, "ENABLE_RAY_CLUSTER", None), bool):
        return "ray._private.ray_constants.ENABLE_RAY_CLUSTER not found or not a bool"
    return None


@contextmanager
def loopback_only(constants: Any = None) -> Iterator[bool]:
    """Make a Ray instance started inside bind to 127.0.0.1. Ray takes the node's address from the route to
    the outside and its servers listen on every interface; it uses the loopback address (and binds its
    servers to it) only where "clusters" are off, the default on macOS and Windows. Its processes inherit
    the switch; it is set back in this process once they are started."""
    if constants is None:
        from ray._private import ray_constants as constants
    if problem := loopback_problem(constants):
        skip("binding a local instance to 127.0.0.1", problem,
             "its servers listen on the machine's outward address as Ray's default")
        yield False
        return
    env_var = constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    previous, enabled = os.environ.get(env_var), constants.ENABLE_RAY_CLUSTER
    os.environ[env_var] = "0"
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield True
    finally:
        constants.ENABLE_RAY_CLUSTER = enabled
        if previous is None:
            os.environ.pop(env_var, None)
        else:
            os.environ[env_var] = previous


TOKEN_AUTH_MODULE = "ray._private.authentication.authentication_token_setup"


def token_auth_switch(setup: ModuleType | None) -> Callable[[], None] | str:
    """Ray's own switch in `setup`, or why it is not usable."""
    if setup is None:
        return f"{TOKEN_AUTH_MODULE} not found"
    switch = getattr(setup, "_enable_token_auth", None)
    if not callable(switch):
        return f"{TOKEN_AUTH_MODULE}._enable_token_auth not found"
    try:
        required = [p for p in inspect.signature(switch).parameters.values()
                    if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        return f"{TOKEN_AUTH_MODULE}._enable_token_auth has no signature to check"
    if required:
        return f"{TOKEN_AUTH_MODULE}._enable_token_auth now needs {', '.join(p.name for p in required)}"
    return switch


def enable_token_auth(setup: ModuleType | None = None) -> bool:
    """Ray enables token authentication for a local instance it starts (creating ~/.ray/auth_token) and says
    so in a warning on every command unless RAY_AUTH_MODE is set. Setting the variable alone is not enough:
    Ray read its configuration at import, so this process would skip making the token that the instance's
    servers then demand. Ray's own switch sets both. Returns whether it was switched on."""
    if setup is None:
        try:
            setup = importlib.import_module(TOKEN_AUTH_MODULE)
        except ImportError:
            setup = None
    switch = token_auth_switch(setup)
    if isinstance(switch, str):
        skip("switching on token authentication", switch,
             "a new local instance authenticates as this Ray does by default (set RAY_AUTH_MODE to choose)")
        return False
    switch()
    return True
