"""Whether a method trains alike on both engines (docs/method-contract.md, "Rules for a loss"): the sequential engine
(one client at a time, the bitwise reference) and the vectorized one (every client at once under torch.func.vmap,
short batches padded with weight-0 samples) train the same clients from the same payload, and every update, metric
and client state must agree within float32 tolerance. The federation is tiny and uneven on purpose: six clients of
unequal sizes, batch 8, two epochs, so batches are padded and clients take unequal step counts. A loss that takes
a plain `.mean()` over the batch instead of honouring `weight`, or that changes module state in place, fails here.

`mooring new method` writes a test that calls it; tests/test_engines.py compares the built-in methods with the
same tolerances."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

# float32 tolerances, vectorized against sequential after a round (|a − b| ≤ atol + RTOL·|b|): the arithmetic differs
# only in summation order (bmm against mm, a padded mean); RTOL covers the per-class feature sums (values ~20); Adam
# divides by √v, which magnifies that order's last bits on its first steps
SGD_ATOL = 2e-5
ADAM_ATOL = 2e-4
RTOL = 1e-5

# six clients of unequal sizes, batch 8, two epochs: short last batches (padding) and unequal step counts
UNEVEN = ["data.num_clients=6", "data.partition.min_size=3", "train.batch_size=8", "train.local_epochs=2",
          "train.optimizer.momentum=0.9", "train.optimizer.weight_decay=0.001", "train.grad_clip=1.0"]


def differences(a: Any, b: Any, atol: float = SGD_ATOL, where: str = "") -> list[str]:
    """Where two nested results (dicts of tensors and numbers) differ beyond the tolerance, one line each."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{where}: keys {sorted(map(str, a))} against {sorted(map(str, b))}"]
        return [line for k in a for line in differences(a[k], b[k], atol, f"{where}.{k}")]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return [f"{where}: {a.dtype}{tuple(a.shape)} against {b.dtype}{tuple(b.shape)}"]
        if a.is_floating_point() and not torch.allclose(a.double(), b.double(), atol=atol, rtol=RTOL):
            return [f"{where}: differs by up to {float((a.double() - b.double()).abs().max()):.3g}"]
        if not a.is_floating_point() and not torch.equal(a, b):
            return [f"{where}: differs"]
        return []
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return [] if abs(a - b) <= atol + RTOL * abs(b) else [f"{where}: {a} against {b}"]
    return [] if a == b else [f"{where}: {a!r} against {b!r}"]


def engine_differences(method: type | str, workdir: str | Path, *overrides: str, rounds: int = 2) -> list[str]:
    """Where the two engines' results differ for `method` (a class, or a `module:Class` reference) on the digits
    split into six uneven clients: every client's update (tensors, stats, metrics but seconds) and state, round after
    round from the same server state; [] when they agree. Partitions are stored under `workdir`. It trains on one
    thread, as a client actor of one CPU does: PyTorch's default of a thread per core made its hundreds of tiny
    steps ten times slower beside other work (a method's first test took 49-110 s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return compared_engines(method, workdir, overrides, rounds)
    finally:
        torch.set_num_threads(threads)


def compared_engines(method: type | str, workdir: str | Path, overrides: tuple[str, ...], rounds: int) -> list[str]:
    """`engine_differences` on the threads it is given."""
    from orchestrator.clients.client_calls import CallKind, ClientCall
    from orchestrator.clients.client_host import ClientHost
    from orchestrator.experiment.config import load_config
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import Server

    reference = method if isinstance(method, str) else f"{method.__module__}:{method.__qualname__}"
    settings = [*UNEVEN, f"algorithm.name={reference}", f"data.partitions_dir={workdir}", *overrides]

    def config(*more: str):
        return load_config(None, [*settings, *more])

    data = prepare_data(config())
    cids = list(range(data.num_clients))
    hosts = {engine: ClientHost(config(f"train.engine={engine}"), data, cids) for engine in ("sequential", "vectorized")}
    if hosts["vectorized"].engine != "vectorized":
        return [f"{reference} does not train on the vectorized engine"]
    server, found = Server(config(), data), []
    for t in range(rounds):
        payload = server.algorithm.payload(server.state, t)
        updates = {e: h.call(ClientCall(CallKind.UPDATE, payload, cids, t)).results for e, h in hosts.items()}
        seq, vec = updates["sequential"], updates["vectorized"]
        for cid in cids:
            where = f"round {t} client {cid}"
            found += differences(seq[cid].tensors, vec[cid].tensors, where=f"{where} tensors")
            found += differences(seq[cid].stats, vec[cid].stats, where=f"{where} stats")
            found += differences({k: v for k, v in seq[cid].metrics.items() if k != "seconds"},
                                 {k: v for k, v in vec[cid].metrics.items() if k != "seconds"}, where=f"{where} metrics")
        found += differences(hosts["sequential"].client_states(), hosts["vectorized"].client_states(),
                             where=f"round {t} client states")
        server.state = server.algorithm.aggregate(server.state, [seq[c] for c in cids], t)
    return found


def padded(workdir: str | Path, *overrides: str) -> bool:
    """Whether the federation `engine_differences` trains has short last batches and unequal step counts."""
    from orchestrator.experiment.config import load_config
    from orchestrator.experiment.datasets import prepare_data

    cfg = load_config(None, [*UNEVEN, f"data.partitions_dir={workdir}", *overrides])
    sizes = prepare_data(cfg).train_sizes()
    batch = cfg.train.batch_size
    return any(n % batch for n in sizes) and len({-(-n // batch) for n in sizes}) > 1
