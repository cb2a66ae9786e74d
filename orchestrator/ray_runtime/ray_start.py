"""Connecting to a Ray cluster, or starting a local instance: checked in one line, actors at normal priority."""
from __future__ import annotations

import ipaddress
import logging
import os
from contextlib import nullcontext, suppress
from urllib.parse import urlparse

from orchestrator.errors import RunError
from orchestrator.ray_runtime.address import AddressError, parse_ray, refusal, unreachable


def check_address(address: str, source: str = "--address") -> None:
    """Fail fast, in one line, when an address is not plainly HOST:PORT or ray://HOST:PORT (orchestrator/
    ray_runtime/address.py: no part that parsers read two ways), or when nothing listens there (ray.init would hang
    or trace). `source`: where the address came from, --address or the RAY_ADDRESS variable."""
    if address == "auto":
        return
    try:
        endpoint = parse_ray(address)
    except AddressError as e:
        raise RunError(refusal(source, address, e)) from None
    if problem := unreachable(endpoint):
        leave_out = "leave out --address" if source == "--address" else f"unset {source}"
        raise RunError(f"{source} {address}: no Ray cluster reachable there ({problem}); "
                       f"start one with `ray start --head` or {leave_out} for a local one")


# A client actor's results (a round's client models) come back inline up to this size instead of through the
# object store (measured in benchmarks/README.md, "Tiny clients"). Ray's default is 100 KiB.
INLINE_RETURNS = {"max_direct_call_object_size": 4 * 1024 * 1024}


def init_ray(**kwargs) -> None:
    """ray.init, with client actors at normal CPU priority where this call starts the Ray instance: Ray
    otherwise starts its workers at niceness 15, so the driver, the raylet and anything else on the machine
    preempt the actors that do the training. (A cluster started with `ray start` takes RAY_worker_niceness
    from that command's environment.) A local instance listens on 127.0.0.1 only, and a driver joining an
    instance at a loopback address joins it there (Ray would otherwise swap 127.0.0.1 for the machine's
    outward address). A new local instance asked for without a dashboard starts lean. These three reach into
    Ray's internals: orchestrator/ray_runtime/ray_internals.py, where each is checked before it applies."""

    import ray

    from orchestrator.ray_runtime import ray_internals

    os.environ.setdefault("RAY_worker_niceness", "0")
    address = kwargs.get("address") or os.environ.get("RAY_ADDRESS")
    lean = nullcontext()
    if address is None:
        if "RAY_AUTH_MODE" not in os.environ:
            ray_internals.enable_token_auth()
        kwargs = {**kwargs, "_system_config": {**INLINE_RETURNS, **kwargs.get("_system_config", {})}}
        if kwargs.get("include_dashboard") is False:
            lean = ray_internals.lean_start()
    if address is None or is_loopback(address):
        with ray_internals.loopback_only(), lean:
            ray.init(**kwargs)
    else:
        ray.init(**kwargs)


def is_loopback(address: str) -> bool:
    """Whether an address (HOST:PORT or a URL) names this machine by a loopback IP or `localhost` (never resolved)."""
    host = urlparse(address if "://" in address else f"ray://{address}").hostname or ""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return False


def ray_session_held() -> bool:
    """Whether this process holds a Ray session (one that runs without Ray never imports it)."""
    import sys

    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


def in_a_ray_task() -> bool:
    """Whether this process is a Ray worker (running a task) rather than a driver. The runtime context's worker is
    not a documented name: a Ray without it reads as a driver (the run then launches a coordinator actor, as before)."""
    if not ray_session_held():
        return False
    import ray

    worker = getattr(ray.get_runtime_context(), "worker", None)
    return getattr(worker, "mode", None) == ray.WORKER_MODE


def ensure_ray(address: str | None = None) -> None:
    import ray

    if ray.is_initialized():
        return
    if address:
        check_address(address)
    elif os.environ.get("RAY_ADDRESS"):  # ray.init joins it as it would --address
        check_address(os.environ["RAY_ADDRESS"], "RAY_ADDRESS")
    try:
        init_ray(address=address, logging_level=logging.WARNING, include_dashboard=False if not address else None,
                 configure_logging=True, log_to_driver=True)
    except Exception as e:  # noqa: BLE001 - Ray raises bare Exceptions too (a node that timed out during start-up)
        raise RunError(f"could not connect to Ray at {address or 'a new local instance'}: "
                       f"{(str(e).splitlines() or [type(e).__name__])[0]}") from None


def end_local_instance(orderly: bool) -> None:
    """End the local Ray instance this process started, with every process of it. `orderly`: through
    ray.shutdown (each process stopped in turn); else the processes are killed at once, as the kernel does to
    the instance's fate-shared ones when this process exits. Either way its dashboard and runtime-env agents,
    which Ray leaves to notice their raylet's end by themselves (about a minute later), end now: they are this
    process's descendants (the raylet's children) until the raylet ends, so they are listed first."""
    import psutil
    import ray

    descendants = psutil.Process().children(recursive=True)
    if orderly and ray.is_initialized():
        ray.shutdown()
    for process in descendants:
        with suppress(psutil.Error):  # ended already
            process.kill()


def may_run_without_ray(address: str | None) -> bool:
    """Whether a command was given no Ray cluster (no address, no RAY_ADDRESS) and this process holds no Ray
    session: any Ray it then uses is a local instance it starts itself (and a run whose clients all train in the
    coordinator needs none)."""
    return not (address or os.environ.get("RAY_ADDRESS") or ray_session_held())


def exit_without_ray_shutdown(code: int = 0) -> None:
    """End this process now with `code`, its output written, instead of waiting for Ray's orderly shutdown of the
    local instance this process started (it stops each of Ray's processes in turn, giving each up to a second:
    3.9 s after a two-trial `mooring sweep` returned, benchmarks/README.md, "The test suite"). Ray starts that
    instance's processes fate-shared with this one (on Linux the kernel kills them when this process exits,
    elsewhere Ray's reaper process does), and its workers exit when their raylet does; its dashboard and
    runtime-env agents are not, and are killed here (`end_local_instance`)."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    if ray_session_held():
        end_local_instance(orderly=False)
    os._exit(code)
