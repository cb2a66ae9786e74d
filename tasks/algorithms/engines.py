"""The two engines that run a method's local objective, and the choice between them (`train.engine`).

- `sequential` (base.train_objective): one client after another, a model and a torch optimizer each: the
  reference.
- `vectorized` (here): each group of a round's clients (orchestrator/clients/client_groups.py: fixed by the config, not by
  the actors, since a client's result depends in its last bits on who shares its batch) at once. Their parameters are stacked along a
  leading client dimension; one `torch.func.vmap` of the model's `functional_call` and of the method's
  `local_loss` computes every client's loss, one backward pass every client's gradient (the clients are
  independent, so the gradient of their summed losses is each one's own). The optimizer (SGD with momentum and
  weight decay, or Adam), per-client gradient clipping and the round's learning rate act on the stacked tensors.
  Every client draws its batches from its own round generator exactly as the sequential engine does
  (base.batch_indices); batches are padded to `batch_size` with 0-weight samples, and a client that has run out
  of steps is masked out of the update, so a short last batch or fewer steps change nothing for the others.
  Where an objective asks (`LocalObjective.record_seen`: FedProto, FedSA), both engines also sum the training
  batches' detached features per class into the client's `RoundContext.recorded`;
  a method's own per-step side computations run through its `step_hooks` (FedFA). A round in phases
  (`LocalObjective.phases`: FedRep, FedBABU, Ditto, FedRoD) is one such training per phase (`train_rounds`), each
  training the parameters its phase names, from where the previous one left every client.

`auto` (the default) takes `vectorized` unless the method or the model cannot be vectorised (`refusal` says why),
or the clients train on CPUs and their model is one where vectorising was measured slower (`auto_prefers_sequential`:
a recurrent model, or one of more than SMALL_MODEL_MACS multiply-adds a sample forward in its linear and convolution
layers).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    LocalObjective,
    RoundContext,
    State,
    TrainSettings,
    batch_indices,
    training_only,
)
from tasks.algorithms.client_side import ClientAlgorithm
from tasks.algorithms.prototypes import ClassMeans
from tasks.algorithms.stacked import ClientLosses, layout_of, split_inputs
from tasks.models.reuse import prepared
from tasks.privacy.mechanisms import clip_rows

ENGINES = ("auto", "sequential", "vectorized")

# A step of at most this many clients runs one client at a time, without vmap, whose fixed cost is three plain steps
# of the digits MLP on this project's CPU: in the tail of a round of Dirichlet-skewed clients, where one large client
# steps alone, that cut the round by 5 %; 2 or 3 gained no more (benchmarks/README.md, "Tiny clients").
ALONE_UP_TO = 1


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


# `auto` on CPU clients: above this many multiply-adds a sample forward a step's cost is its arithmetic, which vmap
# does not shrink, and padding clients' batches to one another adds to it. The bound sits between the two models
# measured on each side (benchmarks/README.md, "Where the model is the cost"): the digits MLP (17 k, vectorised
# 3.7× faster) and acar_cnn (2.4 M, vectorised 1.3× slower); the exact crossover was not swept.
SMALL_MODEL_MACS = 200_000


# an RNN cell's gates, each a matrix-vector product of the input and one of the hidden state
RNN_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
COUNTED = (nn.Linear, nn.modules.conv._ConvNd, nn.RNNBase)


def forward_macs(model: nn.Module, input_shape: tuple[int, ...]) -> int:
    """Multiply-adds of one sample's forward pass in the model's linear, convolution and recurrent layers (the rest
    of a model of these costs little beside them), counted from the shapes a zero sample meets. Not torch's
    FlopCounterMode, whose import of torch._dynamo costs a second and a half of start-up (benchmarks/README.md,
    "Whole run")."""
    macs = 0

    def count(module: nn.Module, inputs, output) -> None:
        nonlocal macs
        if isinstance(module, nn.Linear):
            macs += output.numel() * module.in_features
        elif isinstance(module, nn.modules.conv._ConvNd):
            kernel = math.prod(module.kernel_size) * module.in_channels // module.groups
            macs += output.numel() * kernel
        elif isinstance(module, nn.RNNBase):
            macs += recurrent_macs(module, output[0])

    handles = [m.register_forward_hook(count) for m in model.modules() if isinstance(m, COUNTED)]
    device = next(model.parameters()).device
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, *input_shape, device=device))
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return macs


def recurrent_macs(rnn: nn.RNNBase, output: torch.Tensor) -> int:
    """Multiply-adds of an RNN layer stack over one sequence, from its output (one sample: time steps × hidden ×
    directions): at each step, each layer and direction, every gate's input and hidden products."""
    directions = 2 if rnn.bidirectional else 1
    steps = output.numel() // (rnn.hidden_size * directions)
    inputs = [rnn.input_size] + [rnn.hidden_size * directions] * (rnn.num_layers - 1)
    per_step = sum(RNN_GATES[rnn.mode] * rnn.hidden_size * (n + rnn.hidden_size) for n in inputs) * directions
    return steps * per_step


def auto_prefers_sequential(algorithm: Algorithm) -> str:
    """Why `auto` keeps a vectorisable method on the sequential engine when its clients train on CPUs, or "":
    a recurrent model runs its recurrence step by step under vmap instead of in the fused kernel, 3× slower than
    the sequential engine on the character LSTM, and a model of more than SMALL_MODEL_MACS a sample is slower
    vectorised too (both measured: benchmarks/README.md, "Where the model is the cost")."""
    model = algorithm.working_model()
    if any(isinstance(m, nn.RNNBase) for m in model.modules()):
        return f"model {type(model).__name__} is recurrent"
    return large_model(algorithm)


def large_model(algorithm: Algorithm) -> str:
    """Why a step of the method's model is large (its cost the arithmetic, not the per-step overhead), or "": more
    than SMALL_MODEL_MACS multiply-adds a sample forward."""
    model = algorithm.working_model()
    macs = forward_macs(model, algorithm.setup.input_shape)
    if macs > SMALL_MODEL_MACS:
        return f"model {type(model).__name__} costs {macs:,.0f} multiply-adds a sample (over {SMALL_MODEL_MACS:,})"
    return ""


def choose_engine(requested: str, algorithm: Algorithm, clients_on_gpu: bool = False) -> str:
    """The engine that runs: `auto` falls back to sequential where vectorising is refused, and, for clients on
    CPUs, where it was measured slower (`auto_prefers_sequential`); an explicit `vectorized` that is refused is
    an error (one line: what and why). `clients_on_gpu` is the run's (resources.gpus_per_actor > 0), the same in
    every process, so every host and the coordinator's client groups agree on the engine."""
    if requested == "sequential":
        return "sequential"
    reason = refusal(algorithm)
    if requested == "vectorized" and reason:
        raise ValueError(f"train.engine: vectorized cannot train {algorithm.name}: {reason}; "
                         "use train.engine=auto or sequential")
    if reason or (requested == "auto" and not clients_on_gpu and auto_prefers_sequential(algorithm)):
        return "sequential"
    return "vectorized"


def run_engine(cfg, algorithm: Algorithm) -> str:
    """The engine a run's clients train on (`choose_engine` with the run's own train.engine and resources)."""
    return choose_engine(cfg.train.engine, algorithm, cfg.resources.gpus_per_actor > 0)


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
    """The clients of one `train_vectorized` call after training, still stacked: [K, ...] per state tensor, row j
    holding client `order[j]` of the call (clients are trained in order of their number of steps, most first)."""

    stacked: dict[str, torch.Tensor]
    names: list[str]  # the model's state_dict order
    losses: list[float]  # each client's mean loss over its steps, as the sequential engine reports it (call order)
    order: list[int]  # row j of `stacked` is the call's client order[j]

    def each(self) -> list[Trained]:
        """One `Trained` per client in the call's order, its tensors CPU copies."""
        rows = unstack(self.stacked, self.names)
        by_client = [rows[j] for j in sorted(range(len(self.order)), key=self.order.__getitem__)]
        return [Trained(state, loss) for state, loss in zip(by_client, self.losses)]

    def weighted_sum(self, weights: list[float]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """(Σ_k w_k·θ_k for every float tensor, in float64 on the CPU; the first client's non-float tensors), with
        `weights` in the call's order: what `sum_updates` makes of the clients' models, without a copy per
        client. One float32 matrix-vector product per tensor (converting the stacked models to float64 first
        costs several times more): it equals `sum_updates`' float64 sum to float32 rounding."""
        w = torch.tensor([float(weights[k]) for k in self.order], dtype=torch.float32)
        first_row = self.order.index(0)
        sums, buffers = {}, {}
        for name in self.names:
            t = self.stacked[name].detach()
            if torch.is_floating_point(t):
                sums[name] = (w.to(t.device, t.dtype) @ t.reshape(len(w), -1)).reshape(t.shape[1:]).cpu().double()
            else:
                buffers[name] = t[first_row].cpu().clone()
        return sums, buffers


# ---------------------------------------------------------------------------------------- batches
def round_batches(rounds: list[ClientRound], train: TrainSettings) -> list[list[torch.Tensor]]:
    """Each client's mini-batches of the round (index tensors), drawn from its round generator as the sequential
    engine draws them."""
    return [batch_indices(r.data.num_samples, train, r.ctx.generator) for r in rounds]


def stacked_batches(rounds: list[ClientRound], batches: list[list[torch.Tensor]], device) -> tuple[torch.Tensor, ...]:
    """The clients' `batches`, stacked: x [S, K, B, ...], y [S, K, B], sample weights [S, K, B]
    (0 for padding) and active [S, K] (1 where the client takes step s); S = the most steps of any client,
    B = the longest batch of any (at most batch_size: clients of two samples are not padded to 16). Padding
    repeats the client's first sample, so no loss sees an empty or undefined row."""
    k = len(rounds)
    offsets = np.cumsum([0] + [r.data.num_samples for r in rounds[:-1]])
    flat = [idx for client_batches in batches for idx in client_batches]  # client by client, step by step
    lengths = np.array([idx.shape[0] for idx in flat], dtype=np.int64)
    step_counts = np.array([len(b) for b in batches], dtype=np.int64)
    steps, width = int(step_counts.max()) if k else 0, int(lengths.max()) if flat else 1
    index = np.broadcast_to(offsets.reshape(1, k, 1), (steps, k, width)).copy()
    weight = np.zeros((steps, k, width), dtype=np.float32)
    if flat:  # the position of every batch's samples in the [S, K, B] block, in NumPy: a few µs an operation
        client = np.repeat(np.arange(k), step_counts)
        step_no = np.arange(len(flat)) - np.repeat(np.cumsum(step_counts) - step_counts, step_counts)
        slot_start = (step_no * k + client) * width
        within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        slots = np.repeat(slot_start, lengths) + within
        index.reshape(-1)[slots] = torch.cat(flat).numpy() + np.repeat(offsets[client], lengths)
        weight.reshape(-1)[slots] = 1.0
    index, weight = torch.from_numpy(index), torch.from_numpy(weight).to(torch.get_default_dtype())
    active = (weight.sum(dim=2) > 0).to(torch.get_default_dtype())
    x_all, y_all = torch.cat([r.data.x for r in rounds]), torch.cat([r.data.y for r in rounds])
    return (x_all[index.to(x_all.device)].to(device), y_all[index.to(y_all.device)].to(device), weight.to(device),
            active.to(device), torch.from_numpy(step_counts).to(torch.float64))


def ready_to_train(model: nn.Module, device) -> nn.Module:
    """`model` on `device` and in train mode, moved only where `prepared` must (tasks/models/reuse.py), switched only
    if it is in eval mode (Module.train walks every module)."""
    prepared(model, device=device)
    if not all(m.training for m in model.modules()):
        model.train()
    return model


def stack_states(states: list[State], names: list[str], device) -> dict[str, torch.Tensor]:
    """{name: [K, ...]}: each client's tensor under `name`; one copy repeated if every client shares one state."""
    if all(s is states[0] for s in states):  # expand then copy: a third of `repeat`'s time on small tensors
        return {n: states[0][n].to(device).expand(len(states), *states[0][n].shape).clone(
            memory_format=torch.contiguous_format) for n in names}
    return {n: torch.stack([s[n].to(device) for s in states]) for n in names}


# ----------------------------------------------------------------------------------------- engine
class StackedOptimizer:
    """torch.optim.SGD / Adam's update rules on [K, ...] parameters; a client whose `active` is 0 keeps its
    parameters and optimizer state unchanged. A step covers the rows `first` .. `first + len(active)` only (the
    others keep theirs): the engine orders clients by their number of steps, so those still stepping are a prefix,
    which it steps at once or one client at a time."""

    def __init__(self, params: dict[str, torch.Tensor], train: TrainSettings, lr: float):
        self.params, self.train, self.lr = params, train, lr
        self.state: dict[str, dict[str, torch.Tensor]] = {}
        self.steps = 0

    def step(self, grads: dict[str, torch.Tensor], active: torch.Tensor, everyone: bool | None = None,
             first: int = 0, number: int | None = None) -> None:
        """`grads` of the clients in rows `first` .. `first + len(active)`; `everyone`: whether they are all active
        (known beforehand saves a look at `active`); `number`: which step of theirs this is, 1 for the first (by
        default one more than the previous call's)."""
        t, rows = self.train, slice(first, first + len(active))
        self.steps = self.steps + 1 if number is None else number
        everyone = bool(active.all()) if everyone is None else everyone
        if t.optimizer == "sgd" and everyone:
            self._sgd_everyone(grads, rows)
            return
        for name, g in grads.items():
            p = self.params[name][rows]
            mask = active.reshape(-1, *[1] * (p.dim() - 1))
            if t.weight_decay:
                g = g.add(p, alpha=t.weight_decay)
            if t.optimizer == "adam":
                update = self._adam(name, g, mask, rows)
            elif t.momentum:
                update = self._momentum(name, g, mask, rows)
            else:
                update = g
            p.sub_(update * (mask * self.lr))

    def _buffer(self, name: str, kind: str) -> torch.Tensor:
        """The optimizer state `kind` of every client's tensor `name`, [K, ...], zeros until first stepped."""
        per_name = self.state.setdefault(name, {})
        if kind not in per_name:
            per_name[kind] = torch.zeros_like(self.params[name])
        return per_name[kind]

    def _sgd_everyone(self, grads: dict[str, torch.Tensor], rows: slice) -> None:
        """SGD (weight decay, momentum) when each client of `rows` steps: the same update as the masked path below,
        as a few multi-tensor operations rather than several per tensor."""
        t, names = self.train, list(grads)
        params, gs = [self.params[name][rows] for name in names], list(grads.values())
        if t.weight_decay:
            gs = torch._foreach_add(gs, params, alpha=t.weight_decay)
        if t.momentum:
            bufs = [self._buffer(name, "momentum")[rows] for name in names]
            if self.steps == 1:  # torch's first step: buf = d_p
                torch._foreach_copy_(bufs, gs)
            else:
                torch._foreach_mul_(bufs, t.momentum)
                torch._foreach_add_(bufs, gs)
            gs = bufs
        torch._foreach_add_(params, gs, alpha=-self.lr)

    def _momentum(self, name: str, g: torch.Tensor, mask: torch.Tensor, rows: slice) -> torch.Tensor:
        buf = self._buffer(name, "momentum")[rows]
        stepped = g if self.steps == 1 else buf * self.train.momentum + g  # torch's first step: buf = d_p
        buf.copy_(torch.where(mask > 0, stepped, buf))
        return buf

    def _adam(self, name: str, g: torch.Tensor, mask: torch.Tensor, rows: slice) -> torch.Tensor:
        beta1, beta2, eps = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults, as make_optimizer builds it
        m, v = self._buffer(name, "m")[rows], self._buffer(name, "v")[rows]
        m.copy_(torch.where(mask > 0, m.lerp(g, 1 - beta1), m))
        v.copy_(torch.where(mask > 0, v * beta2 + (1 - beta2) * g * g, v))
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


def train_vectorized(algorithm: ClientAlgorithm, model: nn.Module, rounds: list[ClientRound],
                     batches: list[list[torch.Tensor]] | None = None) -> TrainedBatch:
    """Train the clients of `rounds` (one architecture: `model`) together; their trained states and losses.
    `batches`: their mini-batches where already drawn (`round_batches`).

    The clients are ordered by their number of steps, most first, so that the clients still stepping at step s
    are a prefix: each step computes those only (under Dirichlet label skew client sizes differ a hundredfold, and
    padding every client to the longest's steps would compute the short ones' masked steps for nothing). A
    method's step hooks see every client at every step, masked, as they expect."""
    ctx = rounds[0].ctx
    train, device = ctx.train, ctx.device
    all_batches = round_batches(rounds, train) if batches is None else batches
    order = sorted(range(len(rounds)), key=lambda k: -len(all_batches[k]))
    rounds, all_batches = [rounds[k] for k in order], [all_batches[k] for k in order]
    ready_to_train(model, device)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    state_names = layout_of(model).state_names
    starts = [r.objective.start for r in rounds]
    params = stack_states(starts, trainable, device)
    fixed = stack_states(starts, [n for n in state_names if n not in trainable], device)  # frozen, buffers
    x, y, weight, active, step_counts = stacked_batches(rounds, all_batches, device)
    client_losses = ClientLosses(algorithm, model, [r.objective.inputs for r in rounds])
    batched_leaves = client_losses.batched_leaves
    optimizer = StackedOptimizer(params, train, ctx.lr)
    loss_sum = torch.zeros(len(rounds), dtype=torch.float64, device=device)
    hooks = algorithm.step_hooks(rounds, params)
    if rounds[0].objective.record_seen:
        hooks.append(SeenFeatures(len(rounds), rounds[0].data.num_classes, model.feature_dim, device,
                                  rounds[0].objective.record_clip))

    def step(leaves_of: dict[str, torch.Tensor], loss: torch.Tensor, active_rows: torch.Tensor, everyone: bool | None,
             first: int, number: int) -> None:
        """The optimizer's step `number` of rows `first` ..: `leaves_of` their parameters, `loss` their summed loss."""
        grads = torch.autograd.grad(loss, list(leaves_of.values()), allow_unused=True)
        grads = {name: g for name, g in zip(trainable, grads) if g is not None}  # torch's optimizers skip grad None
        if train.grad_clip is not None:
            grads = clip_per_client(grads, train.grad_clip)
        with torch.no_grad():
            optimizer.step(grads, active_rows, everyone, first, number)

    counts = step_counts.tolist()  # most first
    stepping = [sum(c > s for c in counts) for s in range(x.shape[0])]  # clients still stepping at each step
    for s, n in enumerate(stepping):
        if not hooks and n <= ALONE_UP_TO:  # few clients still stepping: one by one costs less than vmap's fixed cost
            for k in range(n):
                rows = slice(k, k + 1)
                leaf_params = {name: p[rows].detach().requires_grad_(True) for name, p in params.items()}
                loss = client_losses.row(leaf_params, {name: f[rows] for name, f in fixed.items()}, x[s, rows],
                                         y[s, rows], weight[s, rows], [leaf[rows] for leaf in batched_leaves])
                step(leaf_params, loss, active[s, k:k + 1], True, k, s + 1)
                loss_sum[k] += loss.detach().double()
            continue
        if hooks:  # they keep [K] state: every client at every step, masked
            n, everyone = len(rounds), None
        else:  # the prefix still stepping, every one of them active
            everyone = True
        leaf_params = {name: p[:n].detach().requires_grad_(True) for name, p in params.items()}
        losses, h = client_losses.losses(leaf_params, {name: f[:n] for name, f in fixed.items()}, x[s, :n], y[s, :n],
                                         weight[s, :n], [leaf[:n] for leaf in batched_leaves])
        if not everyone:  # a client past its last step contributes no gradient (every one active: ×1, skipped)
            losses = losses * active[s, :n]
        step(leaf_params, losses.sum(), active[s, :n], everyone, 0, s + 1)
        for hook in hooks:
            hook.after_step(h, y[s], weight[s], active[s])
        # summed step after step in float64, as the sequential engine adds its steps' losses
        loss_sum[:n] += losses.detach().double()
    mean_loss = (loss_sum.cpu() / step_counts.clamp_min(1)).tolist()
    for hook in hooks:
        hook.hand_out([r.ctx for r in rounds])
    by_client = [0.0] * len(order)
    for row, k in enumerate(order):
        by_client[k] = mean_loss[row]
    return TrainedBatch({**params, **fixed}, state_names, by_client, order)


def train_rounds(algorithm: ClientAlgorithm, model: nn.Module, rounds: list[ClientRound],
                 batches: list[list[torch.Tensor]] | None = None) -> TrainedBatch:
    """train_vectorized over the clients' phases (LocalObjective.phases, the same for every client of a call), each
    from where the one before left every client, as base.train_phases runs them one client at a time. `batches`
    (already drawn) serve a round without phases only."""
    phases = rounds[0].objective.phases
    if not phases:
        return train_vectorized(algorithm, model, rounds, batches)
    result, starts = None, [r.objective.start for r in rounds]
    for i, phase in enumerate(phases):
        last = i == len(phases) - 1
        phase_rounds = [ClientRound(r.data, phase.context(r.ctx), dataclasses.replace(
            r.objective, start=start, inputs=phase.inputs(r.objective.inputs), phases=(),
            record_seen=r.objective.record_seen and last)) for r, start in zip(rounds, starts)]
        with training_only(model, phase):
            result = train_vectorized(algorithm, model, phase_rounds)
        starts = [t.state for t in result.each()] if not last else starts
    for r, phase_round in zip(rounds, phase_rounds):
        r.ctx.recorded = phase_round.ctx.recorded
    return result


def one_step_foldable(algorithm: ClientAlgorithm, rounds: list[ClientRound]) -> bool:
    """Whether `fold_one_step` is exact for these clients: plain SGD (momentum and weight decay are linear in a
    first step), no gradient clipping, no per-step side computation, one start state and one set of loss inputs
    shared by every client (FedAvg, FedProx)."""
    train, first = rounds[0].ctx.train, rounds[0].objective
    return (train.optimizer == "sgd" and train.grad_clip is None and not first.record_seen and not first.phases
            and not algorithm.capabilities().steps_with_hooks
            and all(r.objective.start is first.start for r in rounds)
            and not any(split_inputs([r.objective.inputs for r in rounds])[1]))


def fold_one_step(algorithm: ClientAlgorithm, model: nn.Module, rounds: list[ClientRound],
                  batches: list[list[torch.Tensor]],
                  weights: list[float]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], list[float]]:
    """Σ_k w_k·θ_k over clients that each take one SGD step from the same start θ (`one_step_foldable`), without
    training them apart: θ_k = θ − lr·(g_k + wd·θ), so Σ_k w_k·θ_k = (1 − lr·wd)·Σ_k w_k·θ − lr·∇_θ Σ_k w_k·L_k(θ),
    one backward pass over every client's batch with θ shared, not copied per client. Exact in real arithmetic;
    in float32 it differs from training them apart by rounding. Returns what `TrainedBatch.weighted_sum` does
    (float64 sums on the CPU, the non-float tensors) and each client's loss."""
    ctx = rounds[0].ctx
    train, device = ctx.train, ctx.device
    ready_to_train(model, device)
    start, inputs = rounds[0].objective.start, rounds[0].objective.inputs
    theta = {n: start[n].to(device).detach().requires_grad_(p.requires_grad) for n, p in model.named_parameters()}
    fixed = {n: start[n].to(device) for n in layout_of(model).state_names if n not in theta}
    x, y, weight, _, _ = stacked_batches(rounds, batches, device)
    losses = ClientLosses(algorithm, model, [inputs]).shared_start({**theta, **fixed}, x[0], y[0], weight[0])
    w = torch.tensor(weights, dtype=losses.dtype, device=device)
    trainable = [n for n, t in theta.items() if t.requires_grad]
    grads = dict(zip(trainable, torch.autograd.grad((w * losses).sum(), [theta[n] for n in trainable],
                                                     allow_unused=True)))
    total, lr, decay = float(sum(weights)), ctx.lr, train.weight_decay
    sums, buffers = {}, {}
    for name, value in {**theta, **fixed}.items():
        value = value.detach()
        if not torch.is_floating_point(value):
            buffers[name] = value.cpu().clone()
        elif grads.get(name) is None:  # no gradient: torch's SGD leaves it as it is, weight decay included
            sums[name] = total * value.cpu().double()
        else:
            sums[name] = (total * (1 - lr * decay)) * value.cpu().double() - lr * grads[name].cpu().double()
    return sums, buffers, losses.detach().double().cpu().tolist()


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
