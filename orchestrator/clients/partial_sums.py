"""resources.partial_sums: a client host folds the models of each group of clients it trained
(orchestrator/clients/client_groups.py) into Σ n_k·θ_k before sending them, and the server folds those partial sums, in
group order, into the weighted mean FedAvg would have taken of the models. The groups are fixed by the config and
the round, so the floats are added in the same order whatever the number of actors."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from tasks.algorithms import ClientUpdate
from tasks.algorithms.base import nbytes
from tasks.algorithms.server_side import ServerAlgorithm


@dataclass
class PartialSum:
    """Some clients' models folded where they trained: Σ_k n_k·θ_k in float64 over those clients (taken in
    client-id order), Σ_k n_k, the non-float tensors of the first of them, and the bytes their models took."""

    first_client: int
    weight: float
    sums: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]
    bytes_sent: int


def sum_updates(results: dict[int, ClientUpdate],
                uniform: bool = False) -> tuple[dict[int, ClientUpdate], list[PartialSum]]:
    """The updates without their model tensors, and one `PartialSum` of them (none without updates); `uniform`
    (privacy.models: clipped models): every client weighs 1 rather than its sample count."""
    cids = sorted(results)
    if not cids:
        return {}, []
    first = results[cids[0]].tensors
    sums = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in first.items() if torch.is_floating_point(v)}
    weights = {cid: 1.0 if uniform else results[cid].num_samples for cid in cids}
    for cid in cids:
        update = results[cid]
        for key, acc in sums.items():
            # in float64, without a float64 copy of each tensor: a weight is a sample count (or 1), so its product
            # with a float32 value is exact, and the sum is rounded once per addition either way
            acc.add_(update.tensors[key], alpha=weights[cid])
    partial = PartialSum(cids[0], float(sum(weights.values())), sums,
                         {k: v for k, v in first.items() if k not in sums}, sum(nbytes(results[c].tensors) for c in cids))
    return {cid: replace(results[cid], tensors={}) for cid in cids}, [partial]


def fold_partial_sums(partials: list[PartialSum], reference: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Σ over partials of their sums, in the order of their first clients (group order: a group is consecutive
    client ids), ÷ Σ of their weights, in each tensor's
    own dtype; non-float tensors from the partial of the lowest client id (as FedAvg takes its first client's)."""
    partials = sorted(partials, key=lambda p: p.first_client)
    total = sum(p.weight for p in partials)
    out = dict(partials[0].buffers)
    for key in partials[0].sums:
        acc = partials[0].sums[key].clone()
        for partial in partials[1:]:
            acc += partial.sums[key]
        out[key] = (acc / total).to(reference[key].dtype)
    return {key: out[key] for key in reference}


def sums_updates(algorithm: ServerAlgorithm, cfg) -> bool:
    """Whether this run's client hosts return partial sums: asked for (the default), the method's capabilities
    declare its aggregation and round metrics FedAvg's (a weighted mean of the client models, nothing else read
    from them), weighted by samples, and nothing else reads each client's model (eval.diagnostics does; so do a
    robust aggregator and an attack on the updates, orchestrator/server/robust_round.py)."""
    capabilities = algorithm.capabilities()
    return (cfg.resources.partial_sums and capabilities.global_model and capabilities.averages_models
            and algorithm.averaging == "samples" and not cfg.eval.diagnostics and not cfg.reads_each_update)


def sums_updates_asked(cfg) -> bool:
    """Whether the run would send partial sums but for what reads each update (`sums_updates` less that)."""
    from tasks.algorithms import ALGORITHMS

    method = ALGORITHMS.get(cfg.algorithm.name)
    capabilities = method.capabilities()
    averaging = cfg.algorithm.averaging or method.default_averaging
    return (cfg.resources.partial_sums and capabilities.global_model and capabilities.averages_models
            and averaging == "samples" and not cfg.eval.diagnostics)
