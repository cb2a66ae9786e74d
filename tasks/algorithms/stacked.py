"""Each stacked client's loss in one step of the vectorized engine (tasks/algorithms/engines.py): K clients'
parameters [K, ...] and batches [K, B, ...] in, K losses and their features out.

Generically the model's `functional_call` and the method's `local_loss` run under `torch.func.vmap`. On a model of
a few small layers that costs several times the arithmetic: vmap's and functional_call's work per call and the
batching rules of every operator of the loss (benchmarks/README.md, "Tiny clients"). Two cheaper routes, each taken
only where it computes the same function:

- the model's own stacked forward (`FLModel.stacked_forward`, where `can_stack_forward` says the model gives one:
  the digits MLP) instead of vmap over `functional_call`;
- and, where the method keeps the base class's loss (it does not override `Algorithm.local_loss`: the plain
  cross-entropy, FedAvg and the methods that change only the server's side), that loss per client row directly
  instead of under vmap.

Every other model or loss keeps the vmap route. Either route is fixed by the model and the method, never by the
actors or the round, so histories stay the same whatever runs them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap
from torch.utils._pytree import tree_flatten, tree_unflatten

from tasks.algorithms.client_side import ClientAlgorithm, ClientSide
from tasks.algorithms.hook_results import checked_loss
from tasks.models.base import FLModel
from tasks.types import State


@dataclass(frozen=True)
class ModelLayout:
    """What the engine asks of a model's structure every call, found once per model instance."""

    state_names: list[str]  # state_dict order
    param_names: list[str]
    tied: bool  # has_tied_tensors
    stacks_forward: bool  # it gives a stacked forward, and no tensor of it goes by two names


# kept on the model instance itself: a weak-keyed table's removal callback, run when a model is collected, is
# where a Ray worker killed with SIGTERM printed an "Exception ignored" traceback
LAYOUT_ATTRIBUTE = "_mooring_layout"


def layout_of(model: nn.Module) -> ModelLayout:
    layout = model.__dict__.get(LAYOUT_ATTRIBUTE)
    if layout is None:
        tied = has_tied_tensors(model)
        stacks = isinstance(model, FLModel) and model.can_stack_forward() and not tied
        layout = ModelLayout(list(model.state_dict()), [n for n, _ in model.named_parameters()], tied, stacks)
        model.__dict__[LAYOUT_ATTRIBUTE] = layout
    return layout


def has_tied_tensors(model: nn.Module) -> bool:
    """Whether one parameter or buffer of `model` goes by two names: only then must functional_call tie them
    (its check of every name costs about 4 % of a tiny round)."""
    named = [t for _, t in model.named_parameters(remove_duplicate=False)]
    named += [t for _, t in model.named_buffers(remove_duplicate=False)]
    return len({id(t) for t in named}) < len(named)


def split_inputs(inputs: list[State]) -> tuple[list, list[bool], object]:
    """The objectives' input leaves, each either shared by every client (the same object: a payload tensor)
    or stacked along the client dimension; and the tree structure to rebuild one client's inputs."""
    flat = [tree_flatten(i) for i in inputs]
    spec = flat[0][1]
    leaves, batched = [], []
    for position, first in enumerate(flat[0][0]):
        column = [f[0][position] for f in flat]
        shared = not isinstance(first, torch.Tensor) or all(v is first for v in column)
        leaves.append(first if shared else torch.stack(column))
        batched.append(not shared)
    return leaves, batched, spec


def stacked_cross_entropy(logits: torch.Tensor, y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """losses.cross_entropy of each client's batch at once: logits [K, B, C], y and 0/1 weights [K, B] → [K], each the
    mean over the client's real samples. F.cross_entropy's fused kernel over the K·B rows: under vmap its rule
    costs more than it saves (losses.cross_entropy), here it is one operator forward and one backward."""
    k, b = y.shape
    nll = F.cross_entropy(logits.reshape(k * b, -1), y.reshape(-1), reduction="none").view(k, b)
    return (nll * weight).sum(dim=1) / weight.sum(dim=1).clamp_min(1.0)


def keeps_base_loss(algorithm: ClientAlgorithm) -> bool:
    """Whether the method's local loss is the base class's plain cross-entropy."""
    return type(algorithm).local_loss is ClientSide.local_loss


class ClientLosses:
    """Each client's loss (and detached features) of one step, for the clients whose objectives' `inputs` were
    given: `losses(params, fixed, x, y, weight, batched_leaves)` for stacked rows, `one(...)` for one client's
    unstacked tensors. `batched_leaves` are the inputs that differ between clients, stacked (`self.batched_leaves`)."""

    def __init__(self, algorithm: ClientAlgorithm, model: nn.Module, inputs: list[State]):
        self.algorithm, self.model = algorithm, model
        layout = layout_of(model)
        self.names, self.tied, self.stacks_forward = layout.param_names, layout.tied, layout.stacks_forward
        self.leaves, self.batched, self.spec = split_inputs(inputs)
        self.batched_leaves = [leaf for leaf, b in zip(self.leaves, self.batched) if b]
        self.base_loss = keeps_base_loss(algorithm)

    def losses(self, params: dict[str, torch.Tensor], fixed: dict[str, torch.Tensor], x: torch.Tensor,
               y: torch.Tensor, weight: torch.Tensor, batched_leaves: list) -> tuple[torch.Tensor, torch.Tensor]:
        """([K] losses, [K, B, D] detached features) of the stacked rows."""
        if not self.stacks_forward:
            return vmap(self.one)(params, fixed, x, y, weight, batched_leaves)
        tensors = {**params, **fixed}
        h, logits = self.model.stacked_forward(tensors, x)
        if self.base_loss:
            return stacked_cross_entropy(logits, y, weight), h.detach()
        return vmap(self._loss)(tensors, x, y, h, logits, weight, batched_leaves), h.detach()

    def row(self, params: dict[str, torch.Tensor], fixed: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
            weight: torch.Tensor, batched_leaves: list) -> torch.Tensor:
        """The loss of one client given as a stack of one row ([1, ...] each), without vmap's fixed cost on either
        route: the stacked forward where the model gives one, functional_call on the row otherwise."""
        if self.stacks_forward:
            return self.losses(params, fixed, x, y, weight, batched_leaves)[0][0]
        return self.one({n: p[0] for n, p in params.items()}, {n: f[0] for n, f in fixed.items()}, x[0], y[0],
                        weight[0], [leaf[0] for leaf in batched_leaves])[0]

    def one(self, params: dict[str, torch.Tensor], fixed: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
            weight: torch.Tensor, batched_leaves: list) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, detached features) of one client's tensors through functional_call."""
        tensors = {**params, **fixed}
        h, logits = functional_call(self.model, tensors, (x,), {"return_features": True}, tie_weights=self.tied)
        return self._loss(tensors, x, y, h, logits, weight, batched_leaves), h.detach()

    def shared_start(self, theta: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                     weight: torch.Tensor) -> torch.Tensor:
        """[K] losses of K clients' batches x [K, B, ...] under one shared set of tensors `theta` (every input shared):
        one forward pass over all K·B samples, which the engine's padding already takes to be independent of one
        another (a padded sample must not change a real one's output), then each client's loss."""
        k, b = x.shape[:2]
        h, logits = functional_call(self.model, theta, (x.reshape(k * b, *x.shape[2:]),), {"return_features": True},
                                    tie_weights=self.tied)
        h, logits = h.reshape(k, b, *h.shape[1:]), logits.reshape(k, b, *logits.shape[1:])
        if self.base_loss:
            return stacked_cross_entropy(logits, y, weight)
        return vmap(self._loss, in_dims=(None, 0, 0, 0, 0, 0, None))(theta, x, y, h, logits, weight, [])

    def _loss(self, tensors: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, h: torch.Tensor,
              logits: torch.Tensor, weight: torch.Tensor, batched_leaves: list) -> torch.Tensor:
        """The method's local_loss of one client (under vmap: one row)."""
        it = iter(batched_leaves)
        inputs = (tree_unflatten([next(it) if b else leaf for leaf, b in zip(self.leaves, self.batched)], self.spec)
                  if self.leaves else {})
        return checked_loss(self.algorithm.local_loss({n: tensors[n] for n in self.names}, x, y, h, logits, inputs,
                                                      weight))
