"""The types every part of Mooring's work shares: a model's state, a client's data, one client's round, the
update it sends back, and the plain helpers on them (their size on the wire, their device, their weighted mean).

It imports nothing else of Mooring, so data (tasks/data/), privacy (tasks/privacy/), the algorithms
(tasks/algorithms/) and the runtime (orchestrator/) all import it without importing one another. Methods written
against `tasks.algorithms.base` keep importing these names there (base.py re-exports them)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

State = dict[str, Any]


@dataclass(frozen=True)
class TrainSettings:
    """The `train` section of the config, as plain values."""

    rounds: int = 20
    local_epochs: int = 1
    local_steps: int | None = None
    batch_size: int = 32
    drop_last: bool = False
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    schedule: str = "constant"
    gamma: float = 0.99
    grad_clip: float | None = None

    def lr_at(self, round_idx: int) -> float:
        if self.schedule == "exponential":
            return self.lr * self.gamma**round_idx
        if self.schedule == "cosine":
            return 0.5 * self.lr * (1 + math.cos(math.pi * round_idx / max(1, self.rounds)))
        return self.lr


@dataclass
class ClientData:
    client_id: int
    x: torch.Tensor  # training split
    y: torch.Tensor
    x_test: torch.Tensor  # the client's own test split (personalized evaluation)
    y_test: torch.Tensor
    num_classes: int
    domain: int = 0
    # the global test set as this client sees it (its domain's rotation), for methods whose personalized
    # evaluation weights the global test set per client (docs/methods/fednh.md §5)
    global_x_test: torch.Tensor | None = None
    global_y_test: torch.Tensor | None = None

    @property
    def num_samples(self) -> int:
        return len(self.y)

    def class_counts(self) -> torch.Tensor:
        return torch.bincount(self.y, minlength=self.num_classes)


@dataclass
class RoundContext:
    """One client's view of one round: its seeded generator, the learning rate, the device."""

    round: int
    seed: int
    train: TrainSettings
    generator: torch.Generator
    device: torch.device = torch.device("cpu")
    # what the engine that trains the client records on the way, for client_result: the training batches' detached
    # features summed per class (a ClassMeans) where the objective asks (LocalObjective.record_seen: FedProto's
    # upload), or a method's own record (FedFA's anchor estimate)
    recorded: Any = None
    # the number of optimizer steps this client takes this round (local_sgd.local_step_count), set by the host
    # that trains it, so a method reads K here rather than drawing the batches again (SCAFFOLD, FedNova)
    local_steps: int | None = None

    @property
    def lr(self) -> float:
        return self.train.lr_at(self.round)


def nbytes(obj: Any) -> int:
    """Bytes of every tensor/array in a nested structure: what a message costs on the wire."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, dict):
        return sum(nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(v) for v in obj)
    return 0


def to_device(obj: Any, device: torch.device | str) -> Any:
    """The same nested structure (dicts, lists, tuples, dataclasses such as ClientData and ClientUpdate) with
    every tensor on `device`. A tensor already there is shared, not copied; other values are kept as they are."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: to_device(getattr(obj, f.name), device)
                                           for f in dataclasses.fields(obj) if f.init})
    return obj


@dataclass
class ClientUpdate:
    """What one client sends back: shared tensors, per-class statistics, and metrics (never raw data)."""

    client_id: int
    num_samples: int
    tensors: State = field(default_factory=dict)  # model tensors (or the parts an algorithm shares)
    stats: State = field(default_factory=dict)  # per-class feature sums/counts, local anchors, prototypes
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def bytes_sent(self) -> int:
        return nbytes(self.tensors) + nbytes(self.stats)


def weighted_average(states: list[State], weights: list[float]) -> State:
    """Σ_k w_k·state_k / Σ_k w_k, tensor by tensor, in the given order (deterministic)."""
    total = float(sum(weights))
    out: State = {}
    for key, ref in states[0].items():
        if not torch.is_floating_point(ref):
            out[key] = ref.clone()  # integer buffers (BatchNorm's num_batches_tracked)
            continue
        acc = torch.zeros_like(ref, dtype=torch.float64)
        for s, w in zip(states, weights):
            acc += s[key].to(torch.float64) * (w / total)
        out[key] = acc.to(ref.dtype)
    return out
