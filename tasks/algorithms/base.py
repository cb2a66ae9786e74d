"""The algorithm interface: a client side, a server side, and typed hyperparameters.

Read it like Flower's strategy API. `Algorithm` is the two sides together, with the models both build and the
declarations the runtime reads (`capabilities()`):

    server (tasks/algorithms/server_side.py, `ServerSide`):
             state = init_global()                # model tensors, anchors or prototypes, extras
             for t in rounds:
                 payload = payload(state, t)          # what goes down to this round's clients
                 updates = [client_update(payload, data_i, state_i, ctx_i) for sampled i]
                 state = aggregate(state, updates, t) # in client-id order, so results never depend on timing
    client (tasks/algorithms/client_side.py, `ClientSide`):
             init_client(data, gen) -> persistent client state (a personal head, a private model, ...)
             local_objective(payload, data, state_i, ctx) -> where training starts, what the loss reads, and
                                                             the round's phases if it has several (FedRep)
             local_loss(params, x, y, h, logits, inputs)  -> the per-batch loss (CE plus the method's term)
             client_result(trained, loss, ...)            -> the update sent up and the client's next state
             client_metrics(trained, loss, ...)           -> metrics sent up beside the loss (no client state)
             client_evaluate(...)   -> personalized accuracy on the client's own test split

A method subclasses `Algorithm` and overrides the hooks of either side it changes. The clients' runtime calls a
method as a `ClientAlgorithm`, the server's as a `ServerAlgorithm` (the protocols beside each side).

The engines (tasks/algorithms/engines.py) own the loop, the optimizer and the masks: `sequential` trains one
client at a time (the bitwise reference, tasks/algorithms/local_training.py), `vectorized` all of an actor's
clients at once with torch.func. Side computations during training (FedFA's anchor estimate and classifier
calibration) are a recorder and an after_step on the sequential engine and `step_hooks` on the vectorized one.
A method whose local training is not (yet) a `local_loss` overrides `client_update` and says why in
`not_vectorized`; it then always trains sequentially.

Everything here is plain PyTorch: no Ray. State is nested dicts of tensors and plain numbers, so it is
checkpointed with `torch.save` and loaded with `weights_only=True` (no pickled code runs on load).
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pydantic import ConfigDict, Field
from torch import nn
from torch.func import functional_call

# The building blocks a method uses live in modules of their own (the sequential engine's training, the losses'
# batch means, a model's tensors as state), as do the shared types and seeds (tasks/types.py, tasks/seeds.py,
# which import nothing else of Mooring, so that data and privacy need not import the algorithms); a method
# imports them here, as it always has.
from tasks.algorithms.capabilities import Capabilities, derive_capabilities
from tasks.algorithms.client_side import ClientSide
from tasks.algorithms.local_training import (  # noqa: F401  (re-exported)
    LocalObjective,
    LossFn,
    Phase,
    batch_indices,
    local_batches,
    make_optimizer,
    step,
    train_batch_loss,
    train_objective,
    train_phases,
    train_supervised,
    training_only,
)
from tasks.algorithms.losses import batch_mean, cross_entropy  # noqa: F401  (re-exported)
from tasks.algorithms.model_state import model_device, on_device, state_of  # noqa: F401  (re-exported)
from tasks.algorithms.server_side import ServerSide
from tasks.models import FLModel, build_model
from tasks.models.reuse import prepared
from tasks.privacy.mechanisms import clip_rows
from tasks.privacy.settings import StatsDP
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


# ------------------------------------------------------------------------------------ the interface
class Algorithm(ClientSide, ServerSide):
    """Base class: FedAvg's behaviour for every hook (its client side and its server side), so a method overrides only
    what it changes; here the models both sides build and the declarations the runtime reads."""

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
    # why a robust aggregator (algorithm.aggregator) cannot stand in for this method's aggregation ("" = it can: its
    # aggregate then takes the robust aggregate where it would have taken the mean; docs/robustness.md)
    no_robust_aggregation: ClassVar[str] = ""

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


# ------------------------------------------------------------------------------- shared building blocks
def frozen_features(model: nn.Module, tensors: State, x: torch.Tensor) -> torch.Tensor:
    """model.features(x) with `tensors` in place of the model's own, no gradient: a frozen model's forward pass
    (MOON's global and previous models) that loads nothing into the module, so it runs under torch.func.vmap."""
    with torch.no_grad():
        return functional_call(model, tensors, (x,), {"return_features": True})[0]



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
