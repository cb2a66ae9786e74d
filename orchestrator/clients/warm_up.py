"""A client host's first-use costs paid while the run starts, not in its first round.

The first local update a process runs pays for more than the update: torch.func's first grad (which imports
torch._dynamo, as a torch.optim optimizer would; Mooring's own optimizers do not: tasks/algorithms/optimizers.py),
autograd's first backward, the vectorized engine's first torch.func trace, the allocator's first blocks, the CUDA
context on a GPU, the method's and the privacy layer's lazy imports. A warm-up runs one such
update on throwaway copies where the host is built (orchestrator/ray_runtime/actors.py: in each client actor, or
in the coordinator that trains the clients): a host of its own for as many of the clients as a round trains
together (up to WARM_UP_MAX_CLIENTS; its own method instance, its own in-memory client states, nothing written to
the run directory), the method's initial global model, and the paths a round takes: every client one local step
(the one-step fold, where it applies), then two (the stacked steps after the first), then one client alone (the
sequential engine), and one torch.save, as a checkpoint and a client state file make. The rounds' shapes matter:
a warm-up of two clients left round 1 of 10 clients twice round 10's, and the rounds after it slower for several
more (benchmarks/README.md, "Fixed cost"). A model whose first pass takes over HEAVY_SECONDS skips the second
(its first-use costs are small beside a round). Its results are dropped, and the random states it draws from
(torch's, on the CPU and the host's GPU, NumPy's and Python's global ones) are put back as they were, so the run's
history is the same with or without it (tests/test_startup.py). `resources.warm_up: false` leaves it out.
"""
from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator

WARM_UP_MAX_CLIENTS = 16
HEAVY_SECONDS = 0.25


def warm_up(cfg, data, client_ids: list[int], device: str = "cpu") -> bool:
    """Throwaway local steps for as many of `client_ids` as a round trains together, on a host of their own (see
    the module's docstring); whether it ran. A method whose update needs what the run's set-up exchange or pre-round exchange
    gives it may fail here: its first real round then runs as it would have without the warm-up, and fails there
    if it fails."""
    clients = client_ids[:min(cfg.clients_per_round, WARM_UP_MAX_CLIENTS)]
    if not cfg.resources.warm_up or not clients:
        return False
    with preserved_random_state(device):
        try:
            throwaway_update(cfg, data, clients, device)
        except Exception:  # noqa: BLE001 - a warm-up is an optimisation: the real round reports any real failure
            return False
    return True


def throwaway_update(cfg, data, clients: list[int], device: str) -> None:
    from orchestrator.io.storage import torch_bytes

    start = time.perf_counter()
    payload = throwaway_call(cfg, data, clients, device, 1)
    torch_bytes(payload)
    if len(clients) > 1 and time.perf_counter() - start < HEAVY_SECONDS:
        throwaway_call(cfg, data, clients, device, 2)
        throwaway_call(cfg, data, clients[:1], device, 1)  # a call of one client takes the sequential path


def build_working_model(algorithm, device: str = "cpu") -> None:
    """The host's own working model, and the one it evaluates the global model with (where the evaluation is split
    over the client actors: orchestrator/ray_runtime/split_evaluation.py), built now rather than in round 1 (the
    warm-up's host has a model of its own); methods with models of their own (several architectures, pairs) build
    theirs as they meet them."""
    from tasks.algorithms.base import Algorithm
    from tasks.algorithms.stacked import layout_of

    if type(algorithm).working_model is Algorithm.working_model:
        with preserved_random_state(device):
            layout_of(algorithm.working_model(device=device))
            if algorithm.capabilities().global_model:
                algorithm.working_model(device=device, key="eval")


def throwaway_call(cfg, data, clients: list[int], device: str, steps: int):
    """One call of `clients`, `steps` local steps each, from the method's initial global model on a host of their
    own; the payload it sent."""
    from orchestrator.clients.client_calls import CallKind, ClientCall
    from orchestrator.clients.client_host import ClientHost
    from orchestrator.clients.partial_sums import sums_updates

    host = ClientHost(with_local_steps(cfg, steps), data, clients, device=device)
    algorithm = host.algorithm
    payload = algorithm.payload(algorithm.init_global(), 0)
    host.call(ClientCall(CallKind.UPDATE, payload, clients, 0, summed=sums_updates(algorithm, cfg)))
    return payload


def with_local_steps(cfg, steps: int, **train):
    """`cfg` with `steps` local steps a client (and any other train settings given)."""
    return cfg.model_copy(update={"train": cfg.train.model_copy(update={"local_steps": steps, **train})})


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
