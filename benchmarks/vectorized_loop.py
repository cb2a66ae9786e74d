"""The limit: FedAvg's round with all of its sampled clients trained at once in one process, no framework.

The clients' parameters are stacked (one slice per client) and `torch.func.vmap` of `torch.func.grad` takes every
client's step together: step s of the round is every client's s-th mini-batch, padded to the largest batch, with a
mask so that padded samples weigh nothing and a client whose batches have run out takes no step (its masked loss
is 0, so its gradient is 0 and plain SGD leaves it where it is). The same clients, batches and average as
benchmarks/bare_loop.py (which runs it as `python -m benchmarks.bare_loop ... --vectorized`); plain SGD only.
"""
from __future__ import annotations

import itertools
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from benchmarks.workload import Workload, accuracy


def masked_loss(model: nn.Module):
    """loss(params, x, y, mask): the mean cross-entropy over the real (mask 1) samples of one client's batch."""
    def loss(params, x, y, mask):
        log_p = F.log_softmax(functional_call(model, params, (x,)), dim=1)
        return -(log_p.gather(1, y[:, None]).squeeze(1) * mask).sum() / mask.sum().clamp_min(1.0)
    return loss


def stacked_batches(w: Workload, round_idx: int, cids: list[int], offsets: list[int]):
    """(index, mask) of shape (clients, steps, batch): each client's batches of the round as rows of the
    concatenated training set, padded with row 0 and mask 0."""
    batches = [w.batches(round_idx, cid) for cid in cids]
    steps = max((len(b) for b in batches), default=0)
    width = max((len(i) for b in batches for i in b), default=0)
    index = torch.zeros(len(cids), steps, width, dtype=torch.long)
    mask = torch.zeros(len(cids), steps, width)
    for k, (cid, client_batches) in enumerate(zip(cids, batches)):
        for s, idx in enumerate(client_batches):
            index[k, s, :len(idx)] = idx + offsets[cid]
            mask[k, s, :len(idx)] = 1.0
    return index, mask


def train_rounds_vectorized(model: nn.Module, w: Workload, round_ends: list[float] | None = None) -> list[float]:
    """FedAvg's rounds, every round's clients trained together; returns the accuracy of each evaluated round (and
    appends each round's end, its evaluation included, on the perf_counter clock to `round_ends`)."""
    x_all = torch.cat([x for x, _ in w.clients])
    y_all = torch.cat([y for _, y in w.clients])
    sizes = [len(y) for _, y in w.clients]
    offsets = [0, *itertools.accumulate(sizes)][:-1]
    step_grads = vmap(grad(masked_loss(model)))
    global_params = {name: p.detach().clone() for name, p in model.named_parameters()}
    lr = w.train.optimizer.lr
    accuracies = []
    for round_idx, cids in enumerate(w.per_round):
        index, mask = stacked_batches(w, round_idx, cids, offsets)
        x, y = x_all[index], y_all[index]
        params = {name: g.expand(len(cids), *g.shape).clone() for name, g in global_params.items()}
        for s in range(index.shape[1]):
            grads = step_grads(params, x[:, s], y[:, s], mask[:, s])
            torch._foreach_add_(list(params.values()), list(grads.values()), alpha=-lr)
        weights = torch.tensor([sizes[c] for c in cids], dtype=torch.float32)
        weights /= weights.sum()
        global_params = {name: torch.tensordot(weights, p, dims=1) for name, p in params.items()}
        if w.evaluated(round_idx):
            load_named(model, global_params)
            accuracies.append(accuracy(model, *w.test, w.eval_batch))
        if round_ends is not None:
            round_ends.append(time.perf_counter())
    load_named(model, global_params)
    return accuracies


def load_named(model: nn.Module, params: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(params[name])
