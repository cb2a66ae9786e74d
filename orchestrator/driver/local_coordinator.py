"""The coordinator in the driver's own process, for a run that needs no Ray: one whose clients all train in the
coordinator (resources.clients_on, orchestrator/ray_runtime/placement.py) and that was given no Ray cluster. Such a
run does not start Ray at all: on the tiny-client workloads starting a local Ray instance, its processes and the
coordinator's was most of a short run's time (benchmarks/README.md, "Whole run"). The rounds are the same code in
the same order, so the history is bitwise the one the coordinator actor gives (tests/test_local_coordinator.py).

The handle stands in for the actor's: `handle.method.remote(...)` runs the method on one thread of the handle's
own, in the order called (as an actor runs its calls), and returns a Future, so the driver's MLflow logging still
overlaps the next rounds. `get`, `ready` and `end` take either kind of handle's results."""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from orchestrator.driver.run_errors import CoordinatorCallError


class _Method:
    def __init__(self, calls: ThreadPoolExecutor, method):
        self.calls, self.method = calls, method

    def remote(self, *args, **kwargs) -> Future:
        return self.calls.submit(self._call, *args, **kwargs)

    def _call(self, *args, **kwargs):
        try:
            return self.method(*args, **kwargs)
        except Exception as e:
            raise CoordinatorCallError(e) from e


class LocalCoordinator:
    """orchestrator/server/coordinator.py's `Coordinator` behind an actor-like handle (see the module's docstring)."""

    def __init__(self, cfg, run_dir: str):
        import torch

        from orchestrator.server.coordinator import Coordinator

        self.threads = torch.get_num_threads()  # the coordinator sets this process's; `end` puts it back
        self.calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mooring-coordinator")
        # its clients train here: no client actors to count. Constructed on its thread (torch imported) meanwhile
        self.coordinator = self.calls.submit(Coordinator, cfg, 0, run_dir, True)

    def __getattr__(self, name: str) -> _Method:
        return _Method(self.calls, getattr(self.coordinator.result(), name))

    def end(self) -> None:
        """Drop the calls not started; the one running finishes on its thread (a round is not interruptible).
        torch's thread count is this process's again."""
        import torch

        self.calls.shutdown(wait=False, cancel_futures=True)
        torch.set_num_threads(self.threads)


def get(result) -> Any:
    """A coordinator call's value: a Future's, or a Ray ObjectRef's."""
    if isinstance(result, Future):
        return result.result()
    import ray

    return ray.get(result)


def ready(result, timeout: float) -> bool:
    """Whether a coordinator call has ended, waiting up to `timeout` seconds."""
    if isinstance(result, Future):
        try:
            result.exception(timeout=timeout)
        except TimeoutError:
            return False
        return True
    import ray

    return bool(ray.wait([result], timeout=timeout)[0])


def end(coordinator) -> None:
    """The coordinator ended: the local one's pending calls dropped, the actor killed."""
    if isinstance(coordinator, LocalCoordinator):
        coordinator.end()
        return
    import ray

    ray.kill(coordinator)
