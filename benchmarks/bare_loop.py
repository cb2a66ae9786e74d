"""The floor every benchmark is measured against: the plainest single-process PyTorch loop doing the same work.

The same clients (the config's partition), the same model architecture (the digits MLP as an `nn.Sequential`),
the same sampled clients per round, the same number and sizes of local batches (each client's samples shuffled
once per local epoch), plain SGD with the config's learning rate, momentum and weight decay, and FedAvg's
sample-weighted average. Per client: a copy of the global model, an SGD optimizer, forward, backward, step.
No framework, no Ray, no tracking, no checkpoints, one intra-op thread. The shuffles come from one torch
generator, so the samples in a batch are not Mooring's; how many batches and how large are.

Run as its own process, it prints one JSON line: {"rounds_seconds": ...}, the time of its rounds alone
(its set-up, data loading and imports excluded; a caller timing the whole process gets those too):

    python -m benchmarks.bare_loop configs/default.yaml --set data.num_clients=1000 ...
"""
from __future__ import annotations

import argparse
import copy
import importlib
import json
import time

import torch
import torch.nn.functional as F
from torch import nn


def plain_mlp(input_dim: int, hidden: list[int], feature_dim: int, num_classes: int) -> nn.Module:
    """Mooring's digits MLP written out: Linear-ReLU layers up to the feature layer, then the classifier."""
    widths = [input_dim, *hidden, feature_dim]
    layers: list[nn.Module] = [nn.Flatten()]
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(feature_dim, num_classes))


def check_supported(cfg) -> None:
    t = cfg.train
    if (cfg.model.name != "mlp" or cfg.algorithm.name not in ("fedavg",) or t.optimizer.name != "sgd"
            or t.local_steps is not None or t.grad_clip is not None or t.lr_schedule.name != "constant"):
        raise ValueError("the bare loop covers FedAvg with the digits MLP, plain SGD, local epochs and a constant "
                         "learning rate, no gradient clipping")


def rounds_seconds(cfg) -> float:
    """Set up outside the clock (data, the sampled clients of every round), then time the rounds alone."""
    from orchestrator.datasets import prepare_data
    from orchestrator.federation import sample_clients

    check_supported(cfg)
    torch.set_num_threads(1)
    importlib.import_module("torch._dynamo")  # the first optimizer of a process imports it (seconds): not a round's
    data = prepare_data(cfg)
    clients = [(d.x, d.y) for d in (data.client_data(c) for c in range(data.num_clients))]
    per_round = [sample_clients(cfg.seed, t, data.num_clients, cfg.clients_per_round) for t in range(cfg.train.rounds)]
    torch.manual_seed(cfg.seed)
    options = cfg.model.options
    model = plain_mlp(clients[0][0][0].numel(), list(options.get("hidden", [128])), options.get("feature_dim", 64),
                      data.num_classes)
    start = time.perf_counter()
    train_rounds(model, clients, per_round, cfg.train, torch.Generator().manual_seed(cfg.seed))
    return time.perf_counter() - start


def train_rounds(model: nn.Module, clients, per_round: list[list[int]], train, generator: torch.Generator) -> None:
    opt = train.optimizer
    for cids in per_round:
        states, weights = [], []
        for cid in cids:
            x, y = clients[cid]
            local = copy.deepcopy(model)
            sgd = torch.optim.SGD(local.parameters(), lr=opt.lr, momentum=opt.momentum, weight_decay=opt.weight_decay)
            for _ in range(train.local_epochs):
                order = torch.randperm(len(y), generator=generator)
                for begin in range(0, len(y), train.batch_size):
                    idx = order[begin:begin + train.batch_size]
                    if train.drop_last and len(idx) < train.batch_size <= len(y):
                        break
                    sgd.zero_grad()
                    F.cross_entropy(local(x[idx]), y[idx]).backward()
                    sgd.step()
            states.append(local.state_dict())
            weights.append(len(y))
        total = sum(weights)
        model.load_state_dict({key: sum(s[key] * (w / total) for s, w in zip(states, weights)) for key in states[0]})


def main() -> None:
    from orchestrator.config import load_config

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bare_loop")
    parser.add_argument("config")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    print(json.dumps({"rounds_seconds": rounds_seconds(load_config(args.config, args.overrides))}), flush=True)


if __name__ == "__main__":
    main()
