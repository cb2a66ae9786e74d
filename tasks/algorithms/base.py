"""The algorithm interface: a client half, a server half, and typed hyperparameters.

Read it like Flower's strategy API:

    server:  state = init_global(gen)                 # model tensors, anchors or prototypes, extras
             for t in rounds:
                 payload = payload(state, t)          # what goes down to this round's clients
                 updates = [client_update(payload, data_i, state_i, ctx_i) for sampled i]
                 state = aggregate(state, updates, t) # in client-id order, so results never depend on timing
    client:  init_client(data, gen) -> persistent client state (a personal head, a private model, ...)
             client_evaluate(...)   -> personalized accuracy on the client's own test split

Everything here is plain PyTorch: no Ray. State is nested dicts of tensors and plain numbers, so it is
checkpointed with `torch.save` and loaded with `weights_only=True` (no pickled code runs on load).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from tasks.models import FLModel, build_model

State = dict[str, Any]


# ------------------------------------------------------------------------------ hyperparameters
class HyperParams(BaseModel):
    """An algorithm's hyperparameters: paper defaults, validation ranges, and the sweeps' search ranges."""

    model_config = ConfigDict(extra="forbid")

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


@dataclass(frozen=True)
class Setup:
    """What an algorithm is built with: the task's shape and the model and training it runs."""

    num_classes: int
    input_shape: tuple[int, ...]
    num_clients: int
    model_name: str
    model_options: dict = field(default_factory=dict)
    train: TrainSettings = field(default_factory=TrainSettings)
    seed: int = 0


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
    # evaluation weights the global test set per client (fednh.md §5)
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

    @property
    def lr(self) -> float:
        return self.train.lr_at(self.round)


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from (run seed, round, client id, ...): the same wherever and whenever it is computed."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(2, np.uint64)[0] >> 1)


def seeded_generator(*parts: int) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(*parts))


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


# ------------------------------------------------------------------------------------ the interface
class Algorithm:
    """Base class: FedAvg's behaviour for every hook, so a method overrides only what it changes."""

    name: ClassVar[str] = ""
    Params: ClassVar[type[HyperParams]] = NoParams
    personalized: ClassVar[bool] = False  # evaluates per-client state on the clients' own test splits
    has_global_model: ClassVar[bool] = True  # evaluated on the global test set
    # A client's state persists between its rounds, so it always trains on the actor that holds it. Methods
    # whose clients keep nothing say False: the coordinator then balances each round's clients over actors.
    keeps_client_state: ClassVar[bool] = True
    spec: ClassVar[str] = ""  # the spec section it implements

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
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.setup.seed if seed is None else seed)
            return build_model(name, self.setup.input_shape, self.num_classes, options)

    def working_model(self, state: State | None = None, key: Any = "global", device=None) -> FLModel:
        """A per-process model instance reused across clients, loaded with `state` (avoids rebuilding)."""
        model = self._model_cache.get(key)
        if model is None:
            model = self._model_cache[key] = self.new_model()
        if device is not None:
            model.to(device)
        if state is not None:
            model.load_state_dict(state)
        return model

    # ------------------------------------------------------------------ server half
    def init_global(self) -> State:
        return {"model": state_of(self.new_model())}

    def payload(self, state: State, round_idx: int) -> State:
        """What is broadcast this round (counted as bytes sent down to each sampled client)."""
        return {"model": state["model"]}

    def aggregate(self, state: State, updates: list[ClientUpdate], round_idx: int) -> State:
        if not updates:
            return state
        weights = [u.num_samples for u in updates]
        return {**state, "model": weighted_average([u.tensors for u in updates], weights)}

    def global_model(self, state: State) -> FLModel | None:
        return self.working_model(state["model"], key="eval") if self.has_global_model else None

    def round_metrics(self, state: State, updates: list[ClientUpdate], round_idx: int) -> dict[str, float]:
        """Server-side diagnostics logged each round (anchor distances, classifier similarity, ...)."""
        return {}

    # one-off exchange before round 0 (FedDebias' shared pseudo-data): clients contribute, the server folds
    needs_setup: ClassVar[bool] = False

    def client_setup(self, data: ClientData, generator: torch.Generator) -> State:
        return {}

    def server_setup(self, state: State, contributions: list[State]) -> State:
        return state

    # an exchange at the start of every round, before training, with the same clients (FedFM's anchors from
    # the broadcast model, eqs. 8-9): each client's contribution, then the server folds them into the state,
    # and the round's payload is taken again from the new state
    pre_round_exchange: ClassVar[bool] = False

    def client_pre_round(self, payload: State, data: ClientData, client_state: State, ctx: RoundContext) -> State:
        return {}

    def server_pre_round(self, state: State, contributions: list[State], round_idx: int) -> State:
        return state

    # ------------------------------------------------------------------ client half
    def init_client(self, data: ClientData) -> State:
        """Persistent per-client state, created on first use (seed it from setup.seed and data.client_id)."""
        return {}

    def client_update(self, payload: State, data: ClientData, client_state: State,
                      ctx: RoundContext) -> tuple[ClientUpdate, State]:
        model = self.working_model(payload["model"], device=ctx.device)
        loss = train_supervised(model, data, ctx)
        return ClientUpdate(data.client_id, data.num_samples, tensors=state_of(model),
                            metrics={"train_loss": loss}), client_state

    def client_evaluate(self, payload: State, data: ClientData, client_state: State,
                        ctx: RoundContext) -> dict[str, tuple[float, float]]:
        """Personalized evaluation: {metric: (correct, total)}; "acc" is the headline."""
        return {}


# ------------------------------------------------------------------------------- shared building blocks
def state_of(model: nn.Module) -> State:
    """A detached CPU copy of a model's tensors."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


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


def make_optimizer(params, ctx: RoundContext) -> torch.optim.Optimizer:
    t = ctx.train
    if t.optimizer == "adam":
        return torch.optim.Adam(params, lr=ctx.lr, weight_decay=t.weight_decay)
    return torch.optim.SGD(params, lr=ctx.lr, momentum=t.momentum, weight_decay=t.weight_decay)


def local_batches(data: ClientData, ctx: RoundContext) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The round's mini-batches: `local_epochs` shuffled passes, or `local_steps` batches drawn with
    replacement; all randomness from the client's round generator."""
    t, n, g = ctx.train, data.num_samples, ctx.generator
    if n == 0:
        return
    if t.local_steps is not None:
        for _ in range(t.local_steps):
            idx = torch.randint(n, (min(t.batch_size, n),), generator=g)
            yield data.x[idx].to(ctx.device), data.y[idx].to(ctx.device)
        return
    for _ in range(t.local_epochs):
        order = torch.randperm(n, generator=g)
        for start in range(0, n, t.batch_size):
            idx = order[start:start + t.batch_size]
            if t.drop_last and len(idx) < t.batch_size and n >= t.batch_size:
                break
            yield data.x[idx].to(ctx.device), data.y[idx].to(ctx.device)


def step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, model: nn.Module, ctx: RoundContext) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if ctx.train.grad_clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), ctx.train.grad_clip)
    optimizer.step()


def train_supervised(model: FLModel, data: ClientData, ctx: RoundContext, extra_loss=None, after_step=None) -> float:
    """Cross-entropy training over the round's batches; returns the mean loss.

    extra_loss(model, x, y, h, logits) -> tensor adds a term (FedProx, FedFA, FedFM, ...);
    after_step(model, x, y) runs after each optimizer step (FedFA's classifier calibration)."""
    model.train()
    optimizer = make_optimizer(model.parameters(), ctx)
    total, count = 0.0, 0
    for x, y in local_batches(data, ctx):
        h = model.features(x)
        logits = model.classifier(h)
        loss = F.cross_entropy(logits, y)
        if extra_loss is not None:
            loss = loss + extra_loss(model, x, y, h, logits)
        step(optimizer, loss, model, ctx)
        if after_step is not None:
            after_step(model, x, y)
        total += float(loss.detach())
        count += 1
    return total / max(count, 1)


@torch.no_grad()
def class_feature_stats(model: FLModel, x: torch.Tensor, y: torch.Tensor, num_classes: int,
                        batch_size: int = 1024, normalize: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class sums of (optionally ℓ2-normalised) features and per-class counts, in eval mode."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(num_classes, model.feature_dim, dtype=torch.float64)
    for start in range(0, len(y), batch_size):
        h = model.features(x[start:start + batch_size]).to(torch.float64).cpu()
        if normalize:
            h = F.normalize(h, dim=1)
        sums.index_add_(0, y[start:start + batch_size].cpu(), h)
    model.train(was_training)
    counts = torch.bincount(y.cpu(), minlength=num_classes).to(torch.float64)
    return sums, counts


@torch.no_grad()
def count_correct(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024,
                  predict=None) -> int:
    """Number of correct top-1 predictions; `predict(x) -> labels` overrides argmax of the logits."""
    was_training = model.training
    model.eval()
    correct = 0
    for start in range(0, len(y), batch_size):
        xb = x[start:start + batch_size]
        pred = predict(xb) if predict is not None else model(xb).argmax(dim=1)
        correct += int((pred.cpu() == y[start:start + batch_size].cpu()).sum())
    model.train(was_training)
    return correct
