"""A client host's first-use costs paid while the run starts, not in its first round.

The first local update a process runs pays for more than the update: torch's first optimizer (which imports
torch._dynamo), autograd's first backward, the vectorized engine's first torch.func trace, the allocator's first
blocks, the CUDA context on a GPU, the method's and the privacy layer's lazy imports. A warm-up runs one such
update on throwaway copies (a call of two clients, and one of one client: the two take different paths), where
the host is built (orchestrator/ray_runtime/actors.py: in each client actor, or in the
coordinator that trains the clients): a host of its own for two of the clients (its own method instance, its own
in-memory client states, nothing written to the run directory), the method's initial global model, one local step
each. Its results are dropped, and the random states it draws from (torch's, on the CPU and the host's GPU,
NumPy's and Python's global ones) are put back as they were, so the run's history is the same with or without it
(tests/test_startup.py). `resources.warm_up: false` leaves it out.
"""
from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

WARM_UP_CLIENTS = 2  # a call of one client takes the sequential path: two reach the vectorized engine's trace


def warm_up(cfg, data, client_ids: list[int], device: str = "cpu") -> bool:
    """One throwaway local step for up to two of `client_ids` on a host of their own (see the module's
    docstring); whether it ran. A method whose update needs what the run's set-up exchange or pre-round exchange
    gives it may fail here: its first real round then runs as it would have without the warm-up, and fails there
    if it fails."""
    clients = client_ids[:WARM_UP_CLIENTS]
    if not cfg.resources.warm_up or not clients:
        return False
    with preserved_random_state(device):
        try:
            throwaway_update(cfg, data, clients, device)
        except Exception:  # noqa: BLE001 - a warm-up is an optimisation: the real round reports any real failure
            return False
    return True


def throwaway_update(cfg, data, clients: list[int], device: str) -> None:
    from orchestrator.clients.client_calls import CallKind, ClientCall
    from orchestrator.clients.client_host import ClientHost
    from orchestrator.clients.partial_sums import sums_updates

    one_step = cfg.model_copy(update={"train": cfg.train.model_copy(update={"local_steps": 1})})
    host = ClientHost(one_step, data, clients, device=device)
    algorithm = host.algorithm
    payload = algorithm.payload(algorithm.init_global(), 0)
    summed = sums_updates(algorithm, cfg)
    host.call(ClientCall(CallKind.UPDATE, payload, clients, 0, summed=summed))
    if len(clients) > 1:  # a call of one client (one a round, or a group's last) takes the sequential path
        host.call(ClientCall(CallKind.UPDATE, payload, clients[:1], 0, summed=summed))


@contextlib.contextmanager
def preserved_random_state(device: str = "cpu") -> Iterator[None]:
    """torch's (CPU, and the current GPU where `device` is one), NumPy's and Python's global random states as
    they were on entry, whatever is drawn inside."""
    import numpy as np
    import torch

    gpus = [torch.cuda.current_device()] if device.startswith("cuda") and torch.cuda.is_available() else []
    numpy_state, python_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng(devices=gpus):
        try:
            yield
        finally:
            np.random.set_state(numpy_state)
            random.setstate(python_state)
