"""The floor every benchmark is measured against: a plain single-process PyTorch loop as an experienced engineer
writes it, doing the same work as Mooring.

The same clients (the config's partition), the digits MLP written out as an `nn.Sequential`, the same sampled
clients per round and the same mini-batches (each client's round generator seeded as Mooring seeds it, so the
two reach the same global model: tests/test_bench.py), SGD with the config's learning rate, momentum and weight
decay, FedAvg's sample-weighted average, the global model evaluated on the test set when `eval.every` says. One
working model for every client: the global parameters are copied into it, fresh momentum buffers, forward,
backward, and torch.optim.SGD's step in its functional form (torch.optim.sgd.sgd: the class's first instance in
a process imports torch._dynamo, 1.5 CPU-seconds of start-up the loop has no use for); the weighted average is
kept as one flat tensor. No framework, no Ray, no tracking, no checkpoints, one intra-op thread.

Run as its own process, it prints one JSON line: {"rounds_seconds": ..., "round_seconds": [...]}, the time of its
rounds alone and of each (set-up, data loading and imports excluded; a caller timing the whole process gets those
too):

    python -m benchmarks.bare_loop configs/default.yaml --set data.num_clients=1000 ...
    python -m benchmarks.bare_loop ... --vectorized      (the limit: benchmarks/vectorized_loop.py)
    python -m benchmarks.bare_loop ... --warm-up         (one throwaway round first, as Mooring's start-up runs)
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib
import json
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parameters_to_vector
from torch.optim.sgd import sgd

from benchmarks.workload import Workload, accuracy
from orchestrator.process_memory import keep_freed_memory


def plain_mlp(input_dim: int, hidden: list[int], feature_dim: int, num_classes: int) -> nn.Module:
    """Mooring's digits MLP written out: Linear-ReLU layers up to the feature layer, then the classifier."""
    widths = [input_dim, *hidden, feature_dim]
    layers: list[nn.Module] = [nn.Flatten()]
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(feature_dim, num_classes))


def check_supported(cfg, vectorized: bool = False, models: tuple[str, ...] = ("mlp",)) -> None:
    t = cfg.train
    if (cfg.model.name not in models or cfg.algorithm.name not in ("fedavg",) or t.optimizer.name != "sgd"
            or t.grad_clip is not None or t.lr_schedule.name != "constant"):
        raise ValueError(f"the plain loops cover FedAvg with the model {' or '.join(models)}, SGD, a constant "
                         "learning rate and no gradient clipping")
    if vectorized and (t.optimizer.momentum or t.optimizer.weight_decay):
        raise ValueError("the vectorised loop covers plain SGD: no momentum, no weight decay")


def prepare_workload(cfg):
    """The clients' data, every round's sampled clients and the global test set, from the config and its seed;
    and the prepared data (FederatedData)."""
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.sampling import sample_clients

    data = prepare_data(cfg)
    clients = [(d.x, d.y) for d in (data.client_data(c) for c in range(data.num_clients))]
    per_round = [sample_clients(cfg.seed, t, data.num_clients, cfg.clients_per_round) for t in range(cfg.train.rounds)]
    x_test, y_test = next(iter(data.test_sets().values()))
    return Workload(clients, per_round, cfg.train, cfg.seed, cfg.eval.every, (x_test, y_test), cfg.eval.batch_size), data


def load_workload(cfg) -> tuple[Workload, nn.Module]:
    """The workload (prepare_workload) and the digits MLP written out, from the config and its seed."""
    workload, data = prepare_workload(cfg)
    torch.manual_seed(cfg.seed)
    options = cfg.model.options
    model = plain_mlp(workload.clients[0][0][0].numel(), list(options.get("hidden", [128])),
                      options.get("feature_dim", 64), data.num_classes)
    return workload, model


def train_rounds(model: nn.Module, w: Workload, round_ends: list[float] | None = None) -> list[float]:
    """FedAvg's rounds on one working model; returns the accuracy of each evaluated round (and appends each
    round's end, its evaluation included, on the perf_counter clock to `round_ends`)."""
    params = list(model.parameters())
    opt = w.train.optimizer
    global_flat = parameters_to_vector(params).detach().clone()
    accuracies = []
    for round_idx, cids in enumerate(w.per_round):
        total = sum(len(w.clients[c][1]) for c in cids)
        averaged = torch.zeros_like(global_flat)
        for cid in cids:
            x, y = w.clients[cid]
            load_flat(params, global_flat)
            momentum_buffers = [None] * len(params) if opt.momentum else []  # a fresh optimizer's
            for idx in w.batches(round_idx, cid):
                grads = torch.autograd.grad(F.cross_entropy(model(x[idx]), y[idx]), params)
                with torch.no_grad():
                    sgd(params, list(grads), momentum_buffers, weight_decay=opt.weight_decay, momentum=opt.momentum,
                        lr=opt.lr, dampening=0.0, nesterov=False, maximize=False)
            averaged.add_(parameters_to_vector(params).detach(), alpha=len(y) / total)
        global_flat = averaged
        load_flat(params, global_flat)
        if w.evaluated(round_idx):
            accuracies.append(accuracy(model, *w.test, w.eval_batch))
        if round_ends is not None:
            round_ends.append(time.perf_counter())
    return accuracies


def load_flat(params: list[nn.Parameter], flat: torch.Tensor) -> None:
    """Copy a flat vector into the parameters (torch's vector_to_parameters would make them views of it, and the
    first client's steps would then move the global model)."""
    chunks = flat.split([p.numel() for p in params])
    with torch.no_grad():
        torch._foreach_copy_(params, [chunk.view_as(p) for chunk, p in zip(chunks, params)])


def set_up_reference_process() -> None:
    """One intra-op thread, and the C allocator as Mooring's processes set it, so that the ratios against a
    reference measure Mooring, not the allocator (orchestrator/process_memory.py)."""
    torch.set_num_threads(1)
    keep_freed_memory()


def round_seconds(cfg, vectorized: bool = False, warm_up: bool = False) -> list[float]:
    """Set up outside the clock (data, the sampled clients of every round), then each round's seconds (after a
    throwaway round where `warm_up`: `throwaway_round`)."""
    check_supported(cfg, vectorized)
    set_up_reference_process()
    workload, model = load_workload(cfg)
    train = reference_loop(vectorized)
    if warm_up:
        throwaway_round(train, model, workload)
    ends: list[float] = []
    start = time.perf_counter()
    train(model, workload, ends)
    return [end - before for before, end in zip([start, *ends], ends)]


def reference_loop(vectorized: bool) -> Callable[..., list[float]]:
    """The plain loop's `train_rounds`, or the vectorised loop's, its imports done (not a round's cost)."""
    if not vectorized:
        return train_rounds
    importlib.import_module("torch._dynamo")  # torch.func's first grad imports it (seconds)
    from benchmarks.vectorized_loop import train_rounds_vectorized

    return train_rounds_vectorized


def throwaway_round(train: Callable[..., list[float]], model: nn.Module, workload: Workload) -> None:
    """Round 1's clients trained once, not evaluated, on a copy of `model`, as Mooring's start-up runs a throwaway
    update (orchestrator/clients/warm_up.py): the rounds timed after it pay no first use (the first backward, the
    allocator's first blocks, torch.func's first trace) either."""
    with torch.random.fork_rng():  # a model that draws (dropout) leaves the timed rounds their random state
        train(copy.deepcopy(model), dataclasses.replace(workload, per_round=workload.per_round[:1], eval_every=0))


def loop_arguments(prog: str) -> argparse.Namespace:
    """A reference loop's command line: CONFIG, --set KEY=VALUE ..., --vectorized."""
    return loop_parser(prog).parse_args()


def loop_parser(prog: str) -> argparse.ArgumentParser:
    """The parser of `loop_arguments`, for a loop that takes more options."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("config")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--vectorized", action="store_true", help="the vectorised loop (benchmarks/vectorized_loop.py)")
    return parser


def main() -> None:
    from orchestrator.experiment.config import load_config

    parser = loop_parser("python -m benchmarks.bare_loop")
    parser.add_argument("--warm-up", action="store_true", help="one throwaway round before the timed ones")
    args = parser.parse_args()
    rounds = round_seconds(load_config(args.config, args.overrides), args.vectorized, args.warm_up)
    print(json.dumps({"rounds_seconds": sum(rounds), "round_seconds": rounds}), flush=True)


if __name__ == "__main__":
    main()
