"""The two engines that run a method's local objective, and the choice between them (`train.engine`).

- `sequential` (base.train_objective): one client after another, a model and a torch optimizer each: the bitwise
  reference.
- `vectorized` (here): all the clients one actor trains in a round at once. Their parameters are stacked along a
  leading client dimension; one `torch.func.vmap` of the model's `functional_call` and of the method's
  `local_loss` computes every client's loss, one backward pass every client's gradient (the clients are
  independent, so the gradient of their summed losses is each one's own). The optimizer (SGD with momentum and
  weight decay, or Adam), per-client gradient clipping and the round's learning rate act on the stacked tensors.
  Every client draws its batches from its own round generator exactly as the sequential engine does
  (base.batch_indices); batches are padded to `batch_size` with 0-weight samples, and a client that has run out
  of steps is masked out of the update, so a short last batch or fewer steps change nothing for the others.
  Where an objective asks (`LocalObjective.record_seen`: FedProto, FedSA), both engines also sum the training
  batches' detached features per class into the client's `RoundContext.recorded`;
  a method's own per-step side computations run through its `step_hooks` (FedFA).

`auto` takes `vectorized` unless the method or the model cannot be vectorised (`refusal` says why).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap
from torch.utils._pytree import tree_flatten, tree_unflatten

from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    LocalObjective,
    RoundContext,
    State,
    TrainSettings,
    batch_indices,
)
from tasks.algorithms.prototypes import ClassMeans
from tasks.privacy.mechanisms import clip_rows

ENGINES = ("auto", "sequential", "vectorized")


# ------------------------------------------------------------------------------------------- choice
def model_refusal(model: nn.Module) -> str:
    """Why a model cannot be trained vectorised, or ""."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            return (f"model {type(model).__name__} has BatchNorm, whose running statistics are updated in place "
                    "in train mode")
        if isinstance(module, nn.modules.dropout._DropoutNd):
            return f"model {type(model).__name__} has dropout, drawn from torch's global generator per client"
    return ""


def refusal(algorithm: Algorithm) -> str:
    """Why `algorithm` with its configured model cannot run on the vectorized engine, or ""."""
    return (algorithm.capabilities().not_vectorized or algorithm.vectorized_refusal()
            or model_refusal(algorithm.working_model()))


def choose_engine(requested: str, algorithm: Algorithm) -> str:
    """The engine that runs: `auto` falls back to sequential where vectorising is refused; an explicit
    `vectorized` that is refused is an error (one line: what and why)."""
    if requested == "sequential":
        return "sequential"
    reason = refusal(algorithm)
    if requested == "vectorized" and reason:
        raise ValueError(f"train.engine: vectorized cannot train {algorithm.name}: {reason}; "
                         "use train.engine=auto or sequential")
    return "sequential" if reason else "vectorized"


# ------------------------------------------------------------------------------------- one client
@dataclass
class ClientRound:
    """One client's round as the vectorized engine takes it."""

    data: ClientData
    ctx: RoundContext
    objective: LocalObjective


@dataclass
class Trained:
    state: State  # the trained model's tensors, CPU copies in state_dict order
    train_loss: float  # mean loss over the client's steps, as the sequential engine reports it


@dataclass
class TrainedBatch:
    """The clients of one `train_vectorized` call after training, still stacked: [K, ...] per state tensor."""

    stacked: dict[str, torch.Tensor]
    names: list[str]  # the model's state_dict order
    losses: list[float]  # each client's mean loss over its steps, as the sequential engine reports it

    def each(self) -> list[Trained]:
        """One `Trained` per client, its tensors CPU copies."""
        return [Trained(state, loss) for state, loss in zip(unstack(self.stacked, self.names), self.losses)]

    def weighted_sum(self, weights: list[float]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """(Σ_k w_k·θ_k in float64 for every float tensor, on the CPU; the first client's non-float tensors): what
        `sum_updates` makes of the clients' models, without making one copy per client first. Summed as one
        matrix product per tensor, so it equals `sum_updates`' client-by-client sum to float64 rounding."""
        w = torch.tensor(weights, dtype=torch.float64)
        sums, buffers = {}, {}
        for name in self.names:
            t = self.stacked[name].detach()
            if torch.is_floating_point(t):
                sums[name] = (w.to(t.device) @ t.reshape(len(w), -1).double()).reshape(t.shape[1:]).cpu()
            else:
                buffers[name] = t[0].cpu().clone()
        return sums, buffers


# ---------------------------------------------------------------------------------------- batches
def stacked_batches(rounds: list[ClientRound], train: TrainSettings, device) -> tuple[torch.Tensor, ...]:
    """Every client's batches for the round, stacked: x [S, K, B, ...], y [S, K, B], sample weights [S, K, B]
    (0 for padding) and active [S, K] (1 where the client takes step s); S = the most steps of any client,
    B = the longest batch of any (at most batch_size: clients of two samples are not padded to 16). Padding
    repeats the client's first sample, so no loss sees an empty or undefined row."""
    batches = [batch_indices(r.data.num_samples, train, r.ctx.generator) for r in rounds]
    k = len(rounds)
    sizes = torch.tensor([r.data.num_samples for r in rounds])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)[:-1]])
    flat = [idx for client_batches in batches for idx in client_batches]  # client by client, step by step
    lengths = torch.tensor([len(idx) for idx in flat], dtype=torch.long)
    step_counts = torch.tensor([len(b) for b in batches], dtype=torch.long)
    steps, width = int(step_counts.max()) if k else 0, int(lengths.max()) if len(flat) else 1
    index = offsets.reshape(1, k, 1).repeat(steps, 1, width)
    weight = torch.zeros(steps, k, width)
    if flat:
        client = torch.repeat_interleave(torch.arange(k), step_counts)
        step_no = torch.arange(len(flat)) - torch.repeat_interleave(step_counts.cumsum(0) - step_counts, step_counts)
        slot_start = (step_no * k + client) * width
        batch_start = lengths.cumsum(0) - lengths
        within = torch.arange(int(lengths.sum())) - torch.repeat_interleave(batch_start, lengths)
        slots = torch.repeat_interleave(slot_start, lengths) + within
        index.view(-1)[slots] = torch.cat(flat) + torch.repeat_interleave(offsets[client], lengths)
        weight.view(-1)[slots] = 1.0
    active = (weight.sum(dim=2) > 0).to(torch.get_default_dtype())
    x_all, y_all = torch.cat([r.data.x for r in rounds]), torch.cat([r.data.y for r in rounds])
    return (x_all[index.to(x_all.device)].to(device), y_all[index.to(y_all.device)].to(device), weight.to(device),
            active.to(device), step_counts.to(torch.float64))


def stack_states(states: list[State], names: list[str], device) -> dict[str, torch.Tensor]:
    """{name: [K, ...]}: each client's tensor under `name`; one copy repeated if every client shares one state."""
    if all(s is states[0] for s in states):
        return {n: states[0][n].to(device).unsqueeze(0).repeat(len(states), *[1] * states[0][n].dim())
                for n in names}
    return {n: torch.stack([s[n].to(device) for s in states]) for n in names}


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


# ----------------------------------------------------------------------------------------- engine
class StackedOptimizer:
    """torch.optim.SGD / Adam's update rules on [K, ...] parameters; a client whose `active` is 0 keeps its
    parameters and optimizer state unchanged."""

    def __init__(self, params: dict[str, torch.Tensor], train: TrainSettings, lr: float):
        self.params, self.train, self.lr = params, train, lr
        self.state: dict[str, dict[str, torch.Tensor]] = {}
        self.steps = 0

    def step(self, grads: dict[str, torch.Tensor], active: torch.Tensor, everyone: bool | None = None) -> None:
        """`everyone`: whether every client is active (known beforehand saves a look at `active`)."""
        t = self.train
        self.steps += 1
        everyone = bool(active.all()) if everyone is None else everyone
        if t.optimizer == "sgd" and everyone:
            self._sgd_everyone(grads)
            return
        for name, g in grads.items():
            p = self.params[name]
            mask = active.reshape(-1, *[1] * (p.dim() - 1))
            if t.weight_decay:
                g = g.add(p, alpha=t.weight_decay)
            if t.optimizer == "adam":
                update = self._adam(name, g, mask)
            elif t.momentum:
                update = self._momentum(name, g, mask)
            else:
                update = g
            p.sub_(update * (mask * self.lr))

    def _sgd_everyone(self, grads: dict[str, torch.Tensor]) -> None:
        """SGD (weight decay, momentum) when every client steps: the same update as the masked path below, as a
        few multi-tensor operations rather than several per tensor."""
        t, names = self.train, list(grads)
        params, gs = [self.params[n] for n in names], list(grads.values())
        if t.weight_decay:
            gs = torch._foreach_add(gs, params, alpha=t.weight_decay)
        if t.momentum:
            bufs = [self.state.get(n, {}).get("momentum") for n in names]
            if any(b is None for b in bufs):  # torch's first step: buf = d_p
                bufs = [g.clone() for g in gs]
            else:
                torch._foreach_mul_(bufs, t.momentum)
                torch._foreach_add_(bufs, gs)
            self.state.update({n: {"momentum": b} for n, b in zip(names, bufs)})
            gs = bufs
        torch._foreach_add_(params, gs, alpha=-self.lr)

    def _momentum(self, name: str, g: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        buf = self.state.get(name, {}).get("momentum")
        if buf is None:  # torch's first step: buf = d_p
            buf = g.clone()
        else:
            buf = torch.where(mask > 0, buf * self.train.momentum + g, buf)
        self.state[name] = {"momentum": buf}
        return buf

    def _adam(self, name: str, g: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        beta1, beta2, eps = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults, as make_optimizer builds it
        st = self.state.setdefault(name, {"m": torch.zeros_like(g), "v": torch.zeros_like(g)})
        m = torch.where(mask > 0, st["m"].lerp(g, 1 - beta1), st["m"])
        v = torch.where(mask > 0, st["v"] * beta2 + (1 - beta2) * g * g, st["v"])
        st["m"], st["v"] = m, v
        # active clients all run a prefix of the steps, so an active client's step count is self.steps
        denom = (v.sqrt() / math.sqrt(1 - beta2**self.steps)).add_(eps)
        return m / denom / (1 - beta1**self.steps)


class SeenFeatures:
    """Every client's per-class sums of the features met in training (base.ClassMeans for [K] clients at once);
    padding samples have weight 0, so only real samples count. A step hook (Algorithm.step_hooks)."""

    def __init__(self, clients: int, num_classes: int, dim: int, device, clip: float | None = None):
        self.num_classes, self.clip = num_classes, clip
        self.sums = torch.zeros(clients, num_classes, dim, dtype=torch.float64, device=device)
        self.counts = torch.zeros(clients, num_classes, dtype=torch.float64, device=device)

    def after_step(self, h: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, active: torch.Tensor) -> None:
        member = F.one_hot(y, self.num_classes).to(torch.float64) * weight.unsqueeze(-1).to(torch.float64)
        h = h.to(torch.float64)
        self.sums += torch.einsum("kbc,kbd->kcd", member, h if self.clip is None else clip_rows(h, self.clip))
        self.counts += member.sum(dim=1)

    def hand_out(self, contexts: list[RoundContext]) -> None:
        """Each client's sums into its round context, as the sequential engine leaves them (CPU, float64)."""
        sums, counts = self.sums.cpu(), self.counts.cpu()
        for k, ctx in enumerate(contexts):
            ctx.recorded = ClassMeans(self.num_classes, sums.shape[2])
            ctx.recorded.sums, ctx.recorded.counts = sums[k].clone(), counts[k].clone()


def clip_per_client(grads: dict[str, torch.Tensor], max_norm: float) -> dict[str, torch.Tensor]:
    """clip_grad_norm_ for every client apart: its gradients scaled by min(1, max_norm / (‖g‖ + 1e-6))."""
    norms = torch.stack([g.reshape(len(g), -1).pow(2).sum(dim=1) for g in grads.values()]).sum(dim=0).sqrt()
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    return {n: g * scale.reshape(-1, *[1] * (g.dim() - 1)) for n, g in grads.items()}


def train_vectorized(algorithm: Algorithm, model: nn.Module, rounds: list[ClientRound]) -> TrainedBatch:
    """Train the clients of `rounds` (one architecture: `model`) together; their trained states and losses."""
    ctx = rounds[0].ctx
    train, device = ctx.train, ctx.device
    model.to(device).train()
    names = [n for n, _ in model.named_parameters()]
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    state_names = list(model.state_dict())
    starts = [r.objective.start for r in rounds]
    params = stack_states(starts, trainable, device)
    fixed = stack_states(starts, [n for n in state_names if n not in trainable], device)  # frozen, buffers
    leaves, batched, spec = split_inputs([r.objective.inputs for r in rounds])
    x, y, weight, active, step_counts = stacked_batches(rounds, train, device)

    def client_loss(p, fixed_k, x_k, y_k, w_k, batched_leaves):
        it = iter(batched_leaves)
        inputs = tree_unflatten([next(it) if b else leaf for leaf, b in zip(leaves, batched)], spec) if leaves else {}
        tensors = {**p, **fixed_k}
        h, logits = functional_call(model, tensors, (x_k,), {"return_features": True})
        return algorithm.local_loss({n: tensors[n] for n in names}, x_k, y_k, h, logits, inputs, w_k), h.detach()

    losses_of = vmap(client_loss)
    batched_leaves = [leaf for leaf, b in zip(leaves, batched) if b]
    optimizer = StackedOptimizer(params, train, ctx.lr)
    step_losses = []
    everyone_active = active.all(dim=1).tolist()
    hooks = algorithm.step_hooks(rounds, params)
    if rounds[0].objective.record_seen:
        hooks.append(SeenFeatures(len(rounds), rounds[0].data.num_classes, model.feature_dim, device,
                                  rounds[0].objective.record_clip))
    for s in range(x.shape[0]):
        leaf_params = {n: p.detach().requires_grad_(True) for n, p in params.items()}
        losses, h = losses_of(leaf_params, fixed, x[s], y[s], weight[s], batched_leaves)
        losses = losses * active[s]
        grads = torch.autograd.grad(losses.sum(), list(leaf_params.values()), allow_unused=True)
        grads = {n: g for n, g in zip(trainable, grads) if g is not None}  # torch's optimizers skip grad None
        if train.grad_clip is not None:
            grads = clip_per_client(grads, train.grad_clip)
        with torch.no_grad():
            optimizer.step(grads, active[s], everyone_active[s])
        for hook in hooks:
            hook.after_step(h, y[s], weight[s], active[s])
        step_losses.append(losses.detach())
    # summed step after step in float64, as the sequential engine adds its steps' losses
    loss_sum = torch.stack(step_losses).double().cumsum(0)[-1].cpu() if step_losses else torch.zeros(len(rounds))
    mean_loss = (loss_sum.double() / step_counts.clamp_min(1)).tolist()
    for hook in hooks:
        hook.hand_out([r.ctx for r in rounds])
    return TrainedBatch({**params, **fixed}, state_names, mean_loss)


def unstack(stacked: dict[str, torch.Tensor], names: list[str]) -> list[State]:
    """Each client's state dict (CPU): one copy per client, its tensors views of it, so a client's update owns its
    own storage (serialising it sends that client's tensors only) at the cost of one copy rather than one each."""
    k = next(iter(stacked.values())).shape[0]
    same_dtype = len({stacked[n].dtype for n in names}) == 1
    if not same_dtype:
        cpu = {n: stacked[n].detach().cpu() for n in names}
        return [{n: cpu[n][c].clone() for n in names} for c in range(k)]
    flat = torch.cat([stacked[n].detach().reshape(k, -1) for n in names], dim=1).cpu()
    sizes = [stacked[n][0].numel() for n in names]
    shapes = [stacked[n].shape[1:] for n in names]
    states = []
    for c in range(k):
        parts = flat[c].clone().split(sizes)
        states.append({n: part.view(shape) for n, part, shape in zip(names, parts, shapes)})
    return states
