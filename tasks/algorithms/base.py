"""The algorithm interface: a client half, a server half, and typed hyperparameters.

Read it like Flower's strategy API:

    server:  state = init_global(gen)                 # model tensors, anchors or prototypes, extras
             for t in rounds:
                 payload = payload(state, t)          # what goes down to this round's clients
                 updates = [client_update(payload, data_i, state_i, ctx_i) for sampled i]
                 state = aggregate(state, updates, t) # in client-id order, so results never depend on timing
    client:  init_client(data, gen) -> persistent client state (a personal head, a private model, ...)
             local_objective(payload, data, state_i, ctx) -> where training starts, what the loss reads, and
                                                             the round's phases if it has several (FedRep)
             local_loss(params, x, y, h, logits, inputs)  -> the per-batch loss (CE plus the method's term)
             client_result(trained, loss, ...)            -> the update sent up and the client's next state
             client_metrics(trained, loss, ...)           -> metrics sent up beside the loss (no client state)
             client_evaluate(...)   -> personalized accuracy on the client's own test split

The engines (tasks/algorithms/engines.py) own the loop, the optimizer and the masks: `sequential` trains one
client at a time (the bitwise reference), `vectorized` all of an actor's clients at once with torch.func. Side
computations during training (FedFA's anchor estimate and classifier calibration) are a recorder and an
after_step on the sequential engine and `step_hooks` on the vectorized one. A method whose local training is not
(yet) a `local_loss` overrides `client_update` and says why in `not_vectorized`; it then always trains
sequentially.

Everything here is plain PyTorch: no Ray. State is nested dicts of tensors and plain numbers, so it is
checkpointed with `torch.save` and loaded with `weights_only=True` (no pickled code runs on load).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pydantic import ConfigDict, Field
from torch import nn
from torch.func import functional_call

from tasks.algorithms.capabilities import Capabilities, derive_capabilities
from tasks.algorithms.hook_results import checked_loss
from tasks.algorithms.optimizers import SGD, Adam, Optimizer
from tasks.algorithms.prototypes import ClassMeans
from tasks.models import FLModel, build_model
from tasks.models.reuse import prepared
from tasks.privacy.mechanisms import clip_rows
from tasks.privacy.settings import StatsDP

# The shared types and seeds live in modules that import nothing else of Mooring (tasks/types.py, tasks/seeds.py),
# so that data and privacy need not import the algorithms; a method imports them here, as it always has.
from tasks.seeds import derive_seed, derive_seeds, seeded_generator, torch_seeded  # noqa: F401  (re-exported)
from tasks.typed_values import TypedValues
from tasks.types import (  # noqa: F401  (re-exported)
    ClientData,
    ClientUpdate,
    RoundContext,
    State,
    TrainSettings,
    nbytes,
    to_device,
    weighted_average,
)


# ------------------------------------------------------------------------------ hyperparameters
class HyperParams(TypedValues):
    """An algorithm's hyperparameters: paper defaults, validation ranges, and the sweeps' search ranges."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @classmethod
    def search_space(cls) -> dict[str, dict[str, Any]]:
        """{field: {"type": "float"|"int"|"categorical", "low", "high", "log", "choices"}} from `searchable`."""
        space = {}
        for name, f in cls.model_fields.items():
            extra = f.json_schema_extra
            if isinstance(extra, dict) and "search" in extra:
                space[name] = dict(extra["search"])
        return space


def searchable(default: Any, low: float | None = None, high: float | None = None, *, log: bool = False,
               choices: list | None = None, integer: bool = False, description: str = "", **bounds) -> Any:
    """A hyperparameter field with the search range its paper's ablations cover."""
    if choices is not None:
        search = {"type": "categorical", "choices": list(choices)}
    else:
        search = {"type": "int" if integer else "float", "low": low, "high": high, "log": log}
    return Field(default, description=description, json_schema_extra={"search": search}, **bounds)


class NoParams(HyperParams):
    pass


# ------------------------------------------------------------------------------- what a run sees
@dataclass(frozen=True)
class Setup:
    """What an algorithm is built with: the task's shape and the model and training it runs."""

    num_classes: int
    input_shape: tuple[int, ...]
    num_clients: int
    model_name: str
    model_options: dict = field(default_factory=dict)
    model_init: str = "torch_default"  # tasks/models/init.py
    model_head_init: str | None = None
    train: TrainSettings = field(default_factory=TrainSettings)
    seed: int = 0
    stats_privacy: StatsDP = field(default_factory=StatsDP)  # privacy.stats (tasks/privacy/class_stats.py)
    averaging: str | None = None  # algorithm.averaging: "samples" | "uniform"; None: the method's default_averaging


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


# ------------------------------------------------------------------------------------ the interface
class Algorithm:
    """Base class: FedAvg's behaviour for every hook, so a method overrides only what it changes."""

    name: ClassVar[str] = ""
    Params: ClassVar[type[HyperParams]] = NoParams
    # Declarations the runtime reads only through `capabilities()` (tasks/algorithms/capabilities.py); None:
    # derived from the hooks the method defines.
    personalized: ClassVar[bool | None] = None  # evaluates clients' own models (derived: defines client_evaluate)
    has_global_model: ClassVar[bool] = True  # evaluated on the global test set
    # what the global model is where it is no model the clients trained as a whole (FedPer, FedRep: the shared body
    # under the initial head); the comparison table marks its global accuracy with it ("": nothing to say)
    global_model_note: ClassVar[str] = ""
    # how a comparison's table and MLflow call a method named by reference (module:Class); "": its `name`
    label: ClassVar[str] = ""
    # a client's state persists between its rounds, so it trains on the actor that holds it (derived: defines
    # init_client, client_result or client_update; not client_metrics); False lets the coordinator balance a
    # round's clients
    keeps_client_state: ClassVar[bool | None] = None
    # why the vectorized engine cannot train this method ("" = it can); docs/design.md, "How it runs", lists every reason
    not_vectorized: ClassVar[str] = ""
    # a variant kept for one paper's protocol (another evaluation, a sync period), left out of `--algorithms all`
    protocol_variant: ClassVar[bool] = False
    # what a client sends the server in a round, in words (the methods' index on the documentation site shows it)
    shares: ClassVar[str] = "the model"
    # a method whose update formula assumes plain SGD (SCAFFOLD's option II, FedNova) says here, in one line, what it
    # does under SGD momentum (its documented adjustment); Adam is then refused (tasks/algorithms/local_sgd.py)
    plain_sgd: ClassVar[str] = ""
    # how the server weighs clients when it averages (algorithm.averaging overrides): "samples" (n_k) or "uniform"
    default_averaging: ClassVar[str] = "samples"
    # whether a method that aggregates in its own way still weighs clients by `aggregation_weights` (the base
    # class's aggregate does), so that algorithm.averaging may be set for it
    follows_averaging: ClassVar[bool] = False

    @classmethod
    def capabilities(cls) -> Capabilities:
        """What the runtime may do with this method, from its declarations and the hooks it defines (computed once)."""
        return derive_capabilities(cls, Algorithm)

    def __init__(self, params: HyperParams, setup: Setup):
        self.params = params
        self.setup = setup
        self.num_classes = setup.num_classes
        self._model_cache: dict[Any, FLModel] = {}

    # ------------------------------------------------------------------ models
    def new_model(self, seed: int | None = None, name: str | None = None, options: dict | None = None) -> FLModel:
        """A freshly initialised model; with a seed, the same weights in every process."""
        name = name or self.setup.model_name
        options = self.setup.model_options if options is None else options
        with torch_seeded(self.setup.seed if seed is None else seed):
            return build_model(name, self.setup.input_shape, self.num_classes, options,
                               self.setup.model_init, self.setup.model_head_init)

    def working_model(self, state: State | None = None, key: Any = "global", device=None) -> FLModel:
        """A per-process model instance reused across clients, loaded with `state` (avoids rebuilding)."""
        return self._cached_model(key, self.new_model, state, device)

    def _cached_model(self, key: Any, build: Callable[[], FLModel], state: State | None = None,
                     device=None) -> FLModel:
        """The per-process model kept under `key` (made by `build` the first time), on `device` and loaded with
        `state` (tasks/models/reuse.py)."""
        model = self._model_cache.get(key)
        if model is None:
            model = self._model_cache[key] = build()
        return prepared(model, state, device)

    # ------------------------------------------------------------------ server half
    def init_global(self) -> State:
        return {"model": state_of(self.new_model())}

    def payload(self, state: State, round_idx: int) -> State:
        """What is broadcast this round (counted as bytes sent down to each sampled client)."""
        return {"model": state["model"]}

    def aggregate(self, state: State, updates: list[ClientUpdate], round_idx: int) -> State:
        if not updates:
            return state
        return {**state, "model": weighted_average([u.tensors for u in updates], self.aggregation_weights(updates))}

    @property
    def averaging(self) -> str:
        """"samples" or "uniform": algorithm.averaging where set, else the method's own default."""
        return self.setup.averaging or self.default_averaging

    def aggregation_weights(self, updates: list[ClientUpdate]) -> list[float]:
        """Each update's weight in the server's average: its client's sample count n_k, or 1 (uniform)."""
        return [1.0 if self.averaging == "uniform" else u.num_samples for u in updates]

    def global_model(self, state: State) -> FLModel | None:
        return self.working_model(state["model"], key="eval") if self.capabilities().global_model else None

    def round_metrics(self, state: State, updates: list[ClientUpdate], round_idx: int) -> dict[str, float]:
        """Server-side diagnostics logged each round (anchor distances, classifier similarity, ...)."""
        return {}

    # one-off exchange before round 0 (FedDebias' shared pseudo-data): clients contribute, the server folds;
    # it runs for a method that defines server_setup
    def client_setup(self, data: ClientData, generator: torch.Generator) -> State:
        return {}

    def server_setup(self, state: State, contributions: list[State]) -> State:
        return state

    # an exchange at the start of every round, before training, with the same clients (FedFM's anchors from
    # the broadcast model, eqs. 8-9): each client's contribution, then the server folds them into the state,
    # and the round's payload is taken again from the new state; it runs for a method that defines
    # server_pre_round
    def client_pre_round(self, payload: State, data: ClientData, client_state: State, ctx: RoundContext) -> State:
        return {}

    def server_pre_round(self, state: State, contributions: list[State], round_idx: int) -> State:
        return state

    # ------------------------------------------------------------------ client half
    def init_client(self, data: ClientData) -> State:
        """Persistent per-client state, created on first use (seed it from setup.seed and data.client_id)."""
        return {}

    def local_objective(self, payload: State, data: ClientData, client_state: State,
                        ctx: RoundContext) -> LocalObjective:
        """Where this client's training starts and the tensors its `local_loss` reads this round."""
        return LocalObjective(start=payload["model"])

    def local_loss(self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, h: torch.Tensor,
                   logits: torch.Tensor, inputs: State, weight: torch.Tensor | None = None) -> torch.Tensor:
        """The per-batch loss as a function of the parameters (h, logits = the model's forward on x under them).

        `weight` (0/1 per sample, the vectorized engine's padding mask) turns every batch mean into a mean over
        the real samples; None (the sequential engine) is the plain mean. No in-place change of any module state:
        the vectorized engine calls it under `torch.func.vmap`."""
        return cross_entropy(logits, y, weight)

    def client_metrics(self, trained: State, train_loss: float, payload: State, data: ClientData,
                       client_state: State, ctx: RoundContext) -> dict[str, float]:
        """Metrics of the client's round sent up beside `train_loss` in its update's `metrics` (read them in
        `round_metrics`); defining it keeps no client state, as defining `client_result` does."""
        return {}

    def client_result(self, trained: State, train_loss: float, payload: State, data: ClientData,
                      client_state: State, ctx: RoundContext) -> tuple[ClientUpdate, State]:
        """The update sent up and the client's next state, from its trained model's tensors (CPU copies)."""
        metrics = {**self.client_metrics(trained, train_loss, payload, data, client_state, ctx),
                   "train_loss": train_loss}
        return ClientUpdate(data.client_id, data.num_samples, tensors=trained, metrics=metrics), client_state

    def client_update(self, payload: State, data: ClientData, client_state: State,
                      ctx: RoundContext) -> tuple[ClientUpdate, State]:
        """One client's round on the sequential engine (the bitwise reference)."""
        objective = self.local_objective(payload, data, client_state, ctx)
        model = self.working_model(objective.start, key=objective.model_key, device=ctx.device)
        if objective.record_seen:
            ctx.recorded = ClassMeans(data.num_classes, model.feature_dim, objective.record_clip)
        loss = train_phases(model, data, ctx, self.local_loss, objective)
        return self.client_result(state_of(model), loss, payload, data, client_state, ctx)

    def step_hooks(self, rounds: list, params: dict[str, torch.Tensor]) -> list:
        """The vectorized engine's side computations at every step for a batch of clients (`rounds`, its
        ClientRounds; `params`, their stacked trainable parameters, updated in place): each hook's
        after_step(h, y, weight, active) sees the step's stacked features (from before the step) once the
        optimizer has stepped, and hand_out(contexts) leaves each client's record in its ctx.recorded. The
        sequential engine's form is a recorder and an after_step in train_objective (FedFA). None here."""
        return []

    def client_evaluate(self, payload: State, data: ClientData, client_state: State,
                        ctx: RoundContext) -> dict[str, tuple[float, float]]:
        """Personalized evaluation: {metric: (correct, total)}; "acc" is the headline."""
        return {}

    def vectorized_refusal(self) -> str:
        """Why the vectorized engine cannot train this instance beyond what its class's capabilities say (a reason
        that depends on its hyperparameters or its models: FedSA's per_sample, FedProto's family), or ""."""
        return ""


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


# ------------------------------------------------------------------------------- shared building blocks
def state_of(model: nn.Module) -> State:
    """A detached CPU copy of a model's tensors."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def on_device(tensors: State, device) -> State:
    """The tensors of a flat state on `device` (on CPU: the very same tensor objects)."""
    return {k: v.to(device) for k, v in tensors.items()}


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


def frozen_features(model: nn.Module, tensors: State, x: torch.Tensor) -> torch.Tensor:
    """model.features(x) with `tensors` in place of the model's own, no gradient: a frozen model's forward pass
    (MOON's global and previous models) that loads nothing into the module, so it runs under torch.func.vmap."""
    with torch.no_grad():
        return functional_call(model, tensors, (x,), {"return_features": True})[0]


def batch_mean(values: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Mean over the batch's first dimension; with 0/1 weights, over the real (weight 1) samples only."""
    if weight is None:
        return values.mean(dim=0)
    w = weight.reshape(-1, *([1] * (values.dim() - 1)))
    return (values * w).sum(dim=0) / weight.sum().clamp_min(1.0)


def cross_entropy(logits: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over the batch (over its real samples when `weight` masks padding)."""
    if weight is None:
        return F.cross_entropy(logits, y)
    # −log_softmax at the label, as F.cross_entropy computes it, without nll_loss: its vmap rule costs a dozen
    # extra operators a step, the vectorized engine's largest per-step cost on small batches
    nll = -logits.log_softmax(dim=-1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
    return batch_mean(nll, weight)


@contextmanager
def evaluating(model: nn.Module):
    """The model in eval mode for the block, then back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@torch.no_grad()
def class_feature_stats(model: FLModel, x: torch.Tensor, y: torch.Tensor, num_classes: int,
                        batch_size: int = 1024, normalize: bool = False,
                        clip: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class sums of (optionally ℓ2-normalised, optionally clipped to ℓ2 norm `clip`) features and per-class
    counts, in eval mode."""
    sums = torch.zeros(num_classes, model.feature_dim, dtype=torch.float64)
    device = model_device(model)
    with evaluating(model):
        for start in range(0, len(y), batch_size):
            h = model.features(x[start:start + batch_size].to(device)).to(torch.float64).cpu()
            if normalize:
                h = F.normalize(h, dim=1)
            if clip is not None:
                h = clip_rows(h, clip)
            sums.index_add_(0, y[start:start + batch_size].cpu(), h)
    counts = torch.bincount(y.cpu(), minlength=num_classes).to(torch.float64)
    return sums, counts


@torch.no_grad()
def count_correct(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024,
                  predict=None) -> int:
    """Number of correct top-1 predictions, computed where the model is; `predict(x) -> labels` overrides
    argmax of the logits."""
    device = model_device(model)
    correct = 0
    with evaluating(model):
        for start in range(0, len(y), batch_size):
            xb = x[start:start + batch_size].to(device)
            pred = predict(xb) if predict is not None else model(xb).argmax(dim=1)
            correct += int((pred.cpu() == y[start:start + batch_size].cpu()).sum())
    return correct
