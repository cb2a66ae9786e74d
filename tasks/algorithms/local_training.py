"""A client's local training on the sequential engine (the bitwise reference): what a round trains (`LocalObjective`,
its `Phase`s) and the loop that trains it, the round's batches with an optimizer step on the loss each; the
vectorized engine (tasks/algorithms/engines.py) draws its batches and optimizers here too."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tasks.algorithms.hook_results import checked_loss
from tasks.algorithms.optimizers import SGD, Adam, Optimizer
from tasks.models import FLModel
from tasks.types import ClientData, RoundContext, State, TrainSettings


@dataclass(frozen=True)
class Phase:
    """One stretch of a client's round that trains only some of the parameters, on passes over the data of its own
    (FedRep: the head with the body held, then the body with the head held). A round's phases run in order, each
    from where the one before ended, with an optimizer of its own and batches drawn from the client's round
    generator; local_loss reads the phase's name as inputs["phase"]. A parameter trains in the phase if its name
    starts with one of `trains` (None: every parameter) and with none of `holds`."""

    name: str
    trains: tuple[str, ...] | None = None
    holds: tuple[str, ...] = ()
    local_epochs: int | None = None  # its passes over the data (None: train.local_epochs; train.local_steps rules)
    # plain SGD at the round's learning rate, whatever train.* sets: no momentum, weight decay or gradient clipping
    # (FedNH's code trains FedRoD's personal head and Ditto's personal model so)
    plain_sgd: bool = False

    def trains_parameter(self, name: str) -> bool:
        return (self.trains is None or name.startswith(self.trains)) and not name.startswith(self.holds)

    def context(self, ctx: RoundContext) -> RoundContext:
        """The client's round context for this phase: its passes over the data and its optimizer, the same
        generator."""
        train = ctx.train
        if self.local_epochs is not None:
            train = dataclasses.replace(train, local_epochs=self.local_epochs)
        if self.plain_sgd:
            train = dataclasses.replace(train, optimizer="sgd", momentum=0.0, weight_decay=0.0, grad_clip=None)
        return ctx if train is ctx.train else dataclasses.replace(ctx, train=train)

    def inputs(self, inputs: State) -> State:
        return {**inputs, "phase": self.name}


@contextmanager
def training_only(model: nn.Module, phase: Phase | None):
    """The parameters `phase` does not train held (requires_grad off) for the block, then as they were."""
    held = [p for name, p in model.named_parameters() if p.requires_grad and phase and not phase.trains_parameter(name)]
    for p in held:
        p.requires_grad_(False)
    try:
        yield model
    finally:
        for p in held:
            p.requires_grad_(True)


@dataclass
class LocalObjective:
    """One client's round as the engines see it: the state its model starts from, and the tensors its loss reads
    (the global model for FedProx, anchors for FedFM, ...). A tensor that is the same object for every client of
    a round (a payload tensor) is shared by the vectorized engine rather than copied per client."""

    start: State
    inputs: State = field(default_factory=dict)
    model_key: Any = "global"  # which per-process model (architecture) trains it
    record_seen: bool = False  # the engine records the features met in training per class, in ctx.recorded
    record_clip: float | None = None  # ...each clipped to this ℓ2 norm first (privacy.stats)
    # the round as consecutive phases, each training a part of the parameters (FedRep); () = one pass training
    # every parameter. The features are recorded (record_seen) in the last phase only.
    phases: tuple[Phase, ...] = ()



def make_optimizer(params, ctx: RoundContext) -> Optimizer:
    """The run's local optimizer (train.optimizer): torch.optim's SGD or Adam update (tasks/algorithms/optimizers.py)."""
    t = ctx.train
    if t.optimizer == "adam":
        return Adam(params, lr=ctx.lr, weight_decay=t.weight_decay)
    return SGD(params, lr=ctx.lr, momentum=t.momentum, weight_decay=t.weight_decay)


def batch_indices(num_samples: int, train: TrainSettings, generator: torch.Generator) -> list[torch.Tensor]:
    """The round's mini-batches as sample indices: `local_epochs` shuffled passes, or `local_steps` batches drawn
    with replacement; all randomness from the client's round generator (both engines draw them here)."""
    n, t = num_samples, train
    if n == 0:
        return []
    if t.local_steps is not None:
        return [torch.randint(n, (min(t.batch_size, n),), generator=generator) for _ in range(t.local_steps)]
    batches = []
    for _ in range(t.local_epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, t.batch_size):
            idx = order[start:start + t.batch_size]
            if t.drop_last and len(idx) < t.batch_size and n >= t.batch_size:
                break
            batches.append(idx)
    return batches


def local_batches(data: ClientData, ctx: RoundContext) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The round's mini-batches of (x, y), on the round's device."""
    for idx in batch_indices(data.num_samples, ctx.train, ctx.generator):
        yield data.x[idx].to(ctx.device), data.y[idx].to(ctx.device)


def step(optimizer: Optimizer, loss: torch.Tensor, model: nn.Module, ctx: RoundContext) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if ctx.train.grad_clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), ctx.train.grad_clip)
    optimizer.step()


LossFn = Callable[..., torch.Tensor]  # (params, x, y, h, logits, inputs, weight=None) -> loss


def train_objective(model: FLModel, data: ClientData, ctx: RoundContext, loss_fn: LossFn, inputs: State,
                    after_step=None, recorder=None) -> float:
    """The sequential engine: the round's batches, loss_fn on the model's forward, an optimizer step each;
    returns the mean loss. after_step(model, x, y) runs after each step (FedFA's classifier calibration);
    recorder.add(h, y) is handed each batch's features (ClassMeans, FedFA's anchor estimate)."""
    model.train()
    optimizer = make_optimizer(model.parameters(), ctx)
    params = dict(model.named_parameters())
    total, count = 0.0, 0
    for x, y in local_batches(data, ctx):
        h, logits = model(x, return_features=True)
        if recorder is not None:
            recorder.add(h, y)
        loss = checked_loss(loss_fn(params, x, y, h, logits, inputs))
        step(optimizer, loss, model, ctx)
        if after_step is not None:
            after_step(model, x, y)
        total += float(loss.detach())
        count += 1
    return total / max(count, 1)


def train_phases(model: FLModel, data: ClientData, ctx: RoundContext, loss_fn: LossFn, objective: LocalObjective) -> float:
    """The sequential engine over the objective's phases (one pass of every parameter where it has none), from the
    model as loaded; the last phase's mean loss, its features recorded into ctx.recorded."""
    if not objective.phases:
        return train_objective(model, data, ctx, loss_fn, objective.inputs, recorder=ctx.recorded)
    loss = 0.0
    for i, phase in enumerate(objective.phases):
        recorder = ctx.recorded if i == len(objective.phases) - 1 else None
        with training_only(model, phase):
            loss = train_objective(model, data, phase.context(ctx), loss_fn, phase.inputs(objective.inputs),
                                   recorder=recorder)
    return loss


def train_supervised(model: FLModel, data: ClientData, ctx: RoundContext, extra_loss=None, after_step=None) -> float:
    """Cross-entropy plus extra_loss(model, x, y, h, logits), for methods that train in their own client_update."""
    def loss_fn(params, x, y, h, logits, inputs):
        loss = F.cross_entropy(logits, y)
        return loss if extra_loss is None else loss + extra_loss(model, x, y, h, logits)
    return train_objective(model, data, ctx, loss_fn, {}, after_step)


def train_batch_loss(module: nn.Module, data: ClientData, ctx: RoundContext,
                     batch_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> float:
    """The round's batches, one optimizer step each on batch_loss(x, y) over `module`'s parameters (clipped over
    them); the mean loss. For methods whose step forwards something other than the batch as drawn (a mixed or
    scaled input, a second module), in their own client_update."""
    module.train()
    optimizer = make_optimizer(module.parameters(), ctx)
    total, count = 0.0, 0
    for x, y in local_batches(data, ctx):
        loss = checked_loss(batch_loss(x, y))
        step(optimizer, loss, module, ctx)
        total, count = total + float(loss.detach()), count + 1
    return total / max(count, 1)

