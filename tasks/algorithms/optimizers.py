"""The local optimizers of the sequential engine: torch.optim.SGD's and torch.optim.Adam's updates, through the
functional forms their `step` calls (torch.optim.sgd.sgd, torch.optim.adam.adam), without torch.optim.Optimizer.

Why not torch.optim's classes: constructing the first `torch.optim.Optimizer` of a process imports torch._dynamo
(its `add_param_group` is wrapped by `torch._disable_dynamo`), about 1.5 CPU-seconds in every process that trains
a client: each client actor, the coordinator, every `mooring run` (benchmarks/README.md, "Whole run"). The
functional forms import nothing. The updates are bitwise those of torch.optim's classes with their defaults
(foreach chosen by torch, no nesterov, no amsgrad; tests/test_optimizers.py). A method that builds a torch.optim
optimizer of its own still can; its process then pays that import, in its warm-up (orchestrator/clients/warm_up.py).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch
from torch.optim.adam import adam
from torch.optim.sgd import sgd

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


class Optimizer(Protocol):
    """What the sequential engine and the methods ask of a local optimizer (torch.optim's classes have it too)."""

    def zero_grad(self, set_to_none: bool = True) -> None: ...

    def step(self) -> None: ...


class FunctionalOptimizer:
    """Parameters, their gradients cleared as torch.optim clears them, and the ones a step updates."""

    def __init__(self, params: Iterable[torch.nn.Parameter]):
        self.params = list(params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
                continue
            if p.grad.grad_fn is not None:
                p.grad.detach_()
            else:
                p.grad.requires_grad_(False)
            p.grad.zero_()

    def with_grad(self) -> list[int]:
        """The positions of the parameters a step updates: those with a gradient."""
        return [i for i, p in enumerate(self.params) if p.grad is not None]


class SGD(FunctionalOptimizer):
    """torch.optim.SGD(params, lr, momentum, weight_decay) (no dampening, no nesterov)."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0):
        super().__init__(params)
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.momentum_buffers: list[torch.Tensor | None] = [None] * len(self.params)

    @torch.no_grad()
    def step(self) -> None:
        live = self.with_grad()
        params = [self.params[i] for i in live]
        buffers = [self.momentum_buffers[i] for i in live] if self.momentum else []
        sgd(params, [p.grad for p in params], buffers, weight_decay=self.weight_decay, momentum=self.momentum,
            lr=self.lr, dampening=0.0, nesterov=False, maximize=False, has_sparse_grad=False)
        for i, buffer in zip(live, buffers):
            self.momentum_buffers[i] = buffer


class Adam(FunctionalOptimizer):
    """torch.optim.Adam(params, lr, weight_decay) (betas 0.9 / 0.999, eps 1e-8, no amsgrad)."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float = 0.0):
        super().__init__(params)
        self.lr, self.weight_decay = lr, weight_decay
        self.moments: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}  # step, exp_avg, exp_avg_sq

    def moments_of(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Parameter i's step count and moments, made at its first step as torch.optim.Adam makes them."""
        if i not in self.moments:
            p = self.params[i]
            scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
            self.moments[i] = (torch.tensor(0.0, dtype=scalar), torch.zeros_like(p, memory_format=torch.preserve_format),
                               torch.zeros_like(p, memory_format=torch.preserve_format))
        return self.moments[i]

    @torch.no_grad()
    def step(self) -> None:
        live = self.with_grad()
        params = [self.params[i] for i in live]
        moments = [self.moments_of(i) for i in live]
        steps, exp_avgs, exp_avg_sqs = ([m[j] for m in moments] for j in range(3))
        adam(params, [p.grad for p in params], exp_avgs, exp_avg_sqs, [], steps, amsgrad=False,
             has_complex=any(torch.is_complex(p) for p in params), beta1=ADAM_BETAS[0], beta2=ADAM_BETAS[1],
             lr=self.lr, weight_decay=self.weight_decay, eps=ADAM_EPS, maximize=False, capturable=False,
             differentiable=False, decoupled_weight_decay=False)
