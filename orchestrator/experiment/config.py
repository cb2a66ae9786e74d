"""The experiment config: a YAML file validated by a typed schema, with dotted `--set` overrides.

Every block forbids unknown keys. An algorithm's hyperparameters live in a block named after it
(`algorithm: {name: fedfa, fedfa: {mu: 0.1}, fedprox: {mu: 0.01}}`): every block present is validated against
its algorithm's schema, only the named one is used, and unset fields take the paper defaults. So one config
runs under any algorithm by switching `algorithm.name`.
"""
from __future__ import annotations

import copy
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from orchestrator.errors import ConfigError
from orchestrator.experiment import safe_yaml
from tasks.typed_values import TypedValues


class NestedFieldError(ValueError):
    """A problem inside a block validated by another schema (an algorithm's or a model's), keeping its path."""

    def __init__(self, path: str, value: Any, msg: str):
        super().__init__(f"{path} = {shown(value)}: {msg}")
        self.path, self.value, self.msg = path, value, msg
        self.near: str | None = None  # an unknown key's nearest valid one, relative as the path is

    @classmethod
    def from_validation(cls, prefix: str, err: ValidationError, schema: type[BaseModel] | None = None
                        ) -> NestedFieldError:
        e = err.errors()[0]
        path = ".".join([prefix, *(str(p) for p in e["loc"])]).strip(".")
        if e["type"] == "extra_forbidden":
            near = nearest_key(schema, e["loc"]) if schema is not None else None
            near = ".".join(p for p in (prefix, near) if p) if near else None
            error = cls(path, e["input"], f"unknown key; did you mean '{near}'?" if near else "unknown key")
            error.near = near
            return error
        return cls(path, e.get("input"), e["msg"].removeprefix("Value error, "))


def validate_block(schema: type[BaseModel], block: dict | None, prefix: str) -> BaseModel:
    try:
        return schema(**(block or {}))
    except ValidationError as e:
        raise NestedFieldError.from_validation(prefix, e, schema) from None
    except TypeError:
        raise NestedFieldError(prefix, block, "must be a mapping of hyperparameters") from None


class Strict(TypedValues):
    """Unknown keys are errors; so are infinite and NaN floats (a learning rate of .inf trains nothing), booleans
    for numbers and integers past 64 bits (tasks/typed_values.py)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


# numpy's and scikit-learn's random states take 0 .. 2**32 - 1
SEED_MAX = 2**32 - 1
Seed = Annotated[int, Field(ge=0, le=SEED_MAX)]


def _storage_location(value: str) -> str:
    from orchestrator.io.storage import unknown_scheme

    problem = unknown_scheme(value)
    if problem:
        raise ValueError(problem)
    return value


StorageLocation = Annotated[str, AfterValidator(_storage_location)]  # a local path or a URI pyarrow.fs can open


def _noise_in_range(value: float) -> float:
    from tasks.privacy.settings import NOISE_RANGE

    low, high = NOISE_RANGE
    if value != 0 and not low <= value <= high:
        raise ValueError(f"0 (no noise) or from {low:g} to {high:g} (docs/privacy.md, \"The range of noise\")")
    return value


NoiseMultiplier = Annotated[float, Field(ge=0), AfterValidator(_noise_in_range)]
# a run name becomes one directory under checkpoint.dir: a name, never a path
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


# ---------------------------------------------------------------------------------------------- data
class PartitionConfig(Strict):
    kind: str = Field("dirichlet", description="iid, dirichlet, dirichlet_equal, shards, natural (the dataset's own "
                      "owners: roles, writers, users), or a split of one's own: module:function or an installed "
                      "entry point (mooring.partitions; docs/design.md)")
    alpha: float = Field(0.1, gt=0, description="Dirichlet concentration (smaller = more skew)")
    min_size: int = Field(10, ge=0, description="minimum training samples per client (Dirichlet; natural: owners "
                          "with fewer are left out)")
    select: Literal["largest", "random", "first"] = Field(
        "largest", description="natural: which data.num_clients of the owners with min_size samples become clients "
        "(the largest, a draw from the seed, or the first in the dataset's order)")
    cap: bool = Field(False, description="cap each client at N/K samples (docs/methods/fednh.md §7, docs/methods/fedsa.md §6)")
    classes_per_client: int = Field(2, ge=1, description="#C for the shards partition")
    min_classes: int = Field(1, ge=1, description="Dirichlet: redraw until every client holds at least this many "
                             "classes (docs/methods/fednh.md §7: 2)")
    max_draws: int = Field(1000, ge=1, description="Dirichlet: at most this many draws for min_size / min_classes")
    repair: bool = Field(False, description="Dirichlet: when no draw meets min_size, move samples from the largest "
                         "clients to those below it, chosen from the seed (for federations where redraws cannot "
                         "succeed; tops up sizes only, not min_classes); the summary reports draws and samples moved")

    @field_validator("kind")
    @classmethod
    def known_kind(cls, v: str) -> str:
        from tasks.data.partition_kinds import BUILT_IN_KINDS, PARTITIONS

        if v not in BUILT_IN_KINDS:
            PARTITIONS.find(v)  # an unknown name or a bad reference: one RegistryError line
        return v


class DomainConfig(Strict):
    """Feature skew: each client's images are rotated by its domain's angle (docs/methods/fedfa.md §11, docs/methods/feddebias.md §10)."""

    kind: Literal["none", "rotation"] = "none"
    angles: list[float] = Field(default_factory=lambda: [0.0, 30.0, 60.0, 90.0])
    assign: Literal["grouped", "per_client"] = Field(
        "grouped",
        description="grouped: the training set is split into one equal part per angle, each part partitioned over "
        "its share of clients; per_client: client i gets angle i mod len(angles) on its own partition",
    )
    test: Literal["every_angle", "one_angle_each"] = Field(
        "every_angle",
        description="the global test set: every_angle, the whole set once per angle (accuracy the mean over the "
        "angles); one_angle_each, test image j at angle j mod len(angles) only, a tenth of the cost at ten angles "
        "(a validation split evaluated on, eval.split, is seen the same way)",
    )


class SyntheticConfig(Strict):
    num_samples: int = Field(1000, gt=0)
    num_classes: int = Field(10, ge=2)
    channels: int = Field(1, ge=1)
    size: int = Field(8, ge=2)
    noise: float = Field(1.0, ge=0)
    seed: Seed = 0


class TextConfig(Strict):
    """Next-character sequences (shakespeare, leaf_sent140): LEAF's fixed length, one target character each."""

    seq_len: int = Field(80, ge=1, le=1000, description="characters per input sequence (LEAF: 80)")
    stride: int | None = Field(None, ge=1, description="shakespeare: characters between the starts of consecutive "
                               "sequences of a role (LEAF: 1); null: seq_len (no overlap)")


DATASET_NAMES = ("digits", "digits_28", "synthetic", "mnist", "fmnist", "emnist", "cifar10", "cifar100",
                 "shakespeare", "leaf_femnist", "leaf_shakespeare", "leaf_sent140")


class DataConfig(Strict):
    dataset: str = "digits"
    root: str = "data"
    download: bool = False
    emnist_split: str = "balanced"
    num_clients: int = Field(10, ge=1)
    test_fraction: float = Field(0.3, ge=0, lt=1, description="global test share for digits/synthetic; 0: no global "
                                 "test set, every sample goes to the clients (methods without a global model)")
    split_seed: Seed | None = Field(None, description="random state of the train/test split; null: the run seed")
    client_test_fraction: float = Field(0.2, ge=0, lt=1, description="per-client test split (personalized eval)")
    validation_fraction: float = Field(
        0.0, ge=0, le=0.5, description="share of each client's training samples held out as its validation split, "
        "drawn from the seed; the clients' splits together are the global validation set. 0: none (the clients "
        "train on all). Sweeps turn it on (pipelines/sweep_objective.py) and evaluate their trials on it")
    partitions_dir: StorageLocation = Field(".mooring/partitions", description="where partitions are stored (path or URI)")
    pad: int = Field(0, ge=0)
    normalize: Literal["none", "center"] = "none"
    partition: PartitionConfig = Field(default_factory=PartitionConfig)
    domains: DomainConfig = Field(default_factory=DomainConfig)
    synthetic: SyntheticConfig = Field(default_factory=SyntheticConfig)
    text: TextConfig = Field(default_factory=TextConfig)

    @field_validator("dataset")
    @classmethod
    def known_dataset(cls, v: str) -> str:
        if v in DATASET_NAMES:
            return v
        from tasks.data.datasets import DATASETS

        try:
            DATASETS.get(v)
        except KeyError:
            raise ValueError(f"unknown dataset; allowed: {', '.join(DATASET_NAMES + tuple(DATASETS.installed()))}, "
                             "or module:function") from None
        return v


# --------------------------------------------------------------------------------------------- model
class ModelConfig(BaseModel):
    """`name`, the initialisation, plus that model's own options (validated against its params schema)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)
    name: str = "mlp"
    init: str = Field("torch_default", description="weight initialisation of every Linear/Conv layer "
                             "(tasks/models/init.py); schemes other than torch_default zero the biases")
    head_init: str | None = Field(None, description="the classifier's initialisation; null: the same as init")

    @field_validator("init", "head_init")
    @classmethod
    def known_init(cls, v: str | None) -> str | None:
        from tasks.models import INIT_SCHEMES

        if v is not None and v not in INIT_SCHEMES:
            raise ValueError(f"unknown initialisation; allowed: {', '.join(INIT_SCHEMES)}")
        return v

    @model_validator(mode="after")
    def known_model(self) -> ModelConfig:
        from tasks.models import MODELS

        validate_block(lookup(MODELS, self.name).params, self.options, "")
        return self

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


# ------------------------------------------------------------------------------------------ algorithm
class ServerOptimizerConfig(Strict):
    """A server optimiser on the aggregated update, for any method with a global model
    (tasks/algorithms/server_optimizers.py): momentum (FedAvgM), adam (FedAdam), yogi (FedYogi)."""

    name: Literal["momentum", "adam", "yogi"]
    lr: float | None = Field(None, gt=0, description="server learning rate η; null: 1 (momentum), 0.01 (adam, yogi)")
    momentum: float = Field(0.9, ge=0, lt=1, description="β₁")
    beta2: float = Field(0.99, gt=0, lt=1, description="β₂ (adam, yogi)")
    tau: float = Field(1e-3, gt=0, description="τ, adaptivity (adam, yogi)")


class CalibrationConfig(Strict):
    """Post-hoc classifier calibration of the global model before it is evaluated (tasks/algorithms/ccvr.py)."""

    name: Literal["ccvr"]
    samples_per_class: int = Field(100, ge=1, description="virtual features drawn per class (M_c)")
    steps: int = Field(100, ge=1, description="SGD steps on the classifier over the virtual features")
    lr: float = Field(0.01, gt=0, description="the calibration's SGD learning rate")
    batch_size: int = Field(64, ge=1)


class AggregatorConfig(Strict):
    """How the server aggregates its clients' updates Δ_k = θ_k − θ into the global model, for any method with a
    global model (tasks/robust/aggregators.py, docs/robustness.md). A bare name (`algorithm.aggregator=median`)
    is the aggregator with its defaults. Any name but mean, and mean with bucketing, read each client's update,
    so they turn resources.partial_sums off."""

    name: Literal["mean", "median", "trimmed_mean", "krum", "geomed", "centered_clipping", "norm_bound"] = Field(
        "mean", description="mean (FedAvg's weighted mean), median (coordinate-wise), trimmed_mean (β), krum "
        "(Krum, m = 1; Multi-Krum, m > 1), geomed (geometric median, RFA's smoothed Weiszfeld), centered_clipping "
        "(τ, iterations), norm_bound (each update clipped to max_norm, then the weighted mean)")
    beta: float = Field(0.1, ge=0, lt=0.5, description="trimmed_mean: the share ⌊β·n⌋ of updates cut from each end "
                        "of every coordinate")
    f: int = Field(1, ge=0, description="krum: the malicious updates it assumes (each score sums the n − f − 2 "
                   "nearest; f is lowered to n − 3 in a round with fewer updates)")
    m: int = Field(1, ge=1, description="krum: the updates averaged (1: Krum; more: Multi-Krum)")
    iterations: int = Field(4, ge=1, description="geomed: Weiszfeld steps at most; centered_clipping: clipping "
                            "iterations a round")
    nu: float = Field(1e-6, gt=0, description="geomed: the smoothing ν (distances below it count as ν)")
    tau: float = Field(1.0, gt=0, description="centered_clipping: the clipping radius τ around the last aggregate")
    max_norm: float = Field(1.0, gt=0, description="norm_bound: the ℓ2 norm each update is clipped to")
    bucketing: int = Field(1, ge=1, description="s: the updates are shuffled into buckets of s and the aggregator "
                           "takes the buckets' means (Karimireddy et al. 2022); 1: no bucketing")

    @model_validator(mode="before")
    @classmethod
    def bare_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @property
    def reads_updates(self) -> bool:
        """Whether it needs each client's update (anything but the plain mean)."""
        return self.name != "mean" or self.bucketing > 1


class ThreatConfig(Strict):
    """Malicious clients and what they do (tasks/robust/attacks.py, docs/robustness.md): model poisoning replaces
    the model update a malicious client sends, data poisoning changes its training split; either applies to
    whatever the method's clients send, so every method is attacked unchanged."""

    attack: Literal["sign_flip", "gaussian", "alie", "ipm", "mimic", "label_flip", "backdoor"] = Field(
        description="sign_flip (−scale·Δ), gaussian (N(0, std²) in place of Δ), alie (μ − z·σ of the honest "
        "updates), ipm (−ε·μ of the honest updates), mimic (copies one honest client), label_flip (y → C − 1 − y), "
        "backdoor (a trigger patch relabelled target)")
    fraction: float = Field(0.2, ge=0, le=1, description="the share of clients that are malicious")
    selection: Literal["fixed", "per_round"] = Field(
        "fixed", description="fixed: round(fraction·N) clients drawn from the seed, malicious in every round they "
        "are sampled; per_round: round(fraction·K) of each round's clients, drawn from (seed, round); data "
        "poisoning needs fixed")
    scale: float = Field(1.0, gt=0, description="sign_flip: the scale of the reversed update (1: bit flipping)")
    std: float = Field(1.0, gt=0, description="gaussian: the standard deviation of the noise sent")
    z: float | None = Field(None, description="alie: z; null: Φ⁻¹((n − s)/n), s = ⌊n/2 + 1⌋ − f (Baruch et al.)")
    epsilon: float = Field(0.1, gt=0, description="ipm: ε")
    warmup: int = Field(1, ge=1, description="mimic: the rounds over which the attackers choose whom to copy")
    target: int = Field(0, ge=0, description="backdoor: the class the trigger leads to")
    trigger_size: int = Field(3, ge=1, description="backdoor: the trigger patch's side, in pixels")
    trigger_value: float | None = Field(None, description="backdoor: the patch's value; null: the largest input "
                                        "value of the split poisoned or tested")
    poison_fraction: float = Field(0.5, gt=0, le=1, description="backdoor: the share of a malicious client's "
                                   "training samples that carry the trigger")

    @property
    def poisons_data(self) -> bool:
        return self.attack in ("label_flip", "backdoor")


class AlgorithmConfig(BaseModel):
    """`name` plus one block of hyperparameters per algorithm; each block validated by its algorithm. Four
    settings apply to any method: `averaging` (samples | uniform; default: the method's own), `server_optimizer`,
    `calibration` and `aggregator` (null: none)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)
    name: str = "fedavg"
    averaging: Literal["samples", "uniform"] | None = None
    server_optimizer: ServerOptimizerConfig | None = None
    calibration: CalibrationConfig | None = None
    aggregator: AggregatorConfig | None = Field(None, description="robust aggregation of the clients' updates "
                                                "(a name, or a block); null: the method's own mean")

    @model_validator(mode="after")
    def known_algorithms(self) -> AlgorithmConfig:
        from tasks.algorithms import ALGORITHMS

        method = lookup(ALGORITHMS, self.name)
        # the blocks of built-in methods and of methods from outside Mooring named so far (a comparison's base
        # config keeps the block of a variant it does not run)
        blocks = ({name: ALGORITHMS.get(name) for name in ALGORITHMS.names()}
                  | {m.name: m for m in ALGORITHMS.resolved()} | {method.name: method})
        for name, block in (self.model_extra or {}).items():
            if name not in blocks:
                raise NestedFieldError(name, block, f"not an algorithm's block; allowed: name, {', '.join(blocks)}")
            validate_block(blocks[name].Params, block, name)
        return self

    @property
    def block_name(self) -> str:
        """The key of the named algorithm's hyperparameter block: its own `name` (a method from outside Mooring is
        named by a reference, `module:Class`, and its block by the class's `name`)."""
        from tasks.algorithms import ALGORITHMS

        return ALGORITHMS.get(self.name).name

    def params_for(self, name: str | None = None):
        """The validated hyperparameters of `name` (default: the named algorithm), unset ones at defaults."""
        from tasks.algorithms import ALGORITHMS

        method = ALGORITHMS.get(name or self.name)
        return method.Params(**((self.model_extra or {}).get(method.name) or {}))


def lookup(registry, name: str):
    """What `name` names in the registry, or the one line saying why nothing usable does."""
    from tasks.registry import RegistryError

    try:
        return registry.find(name)
    except RegistryError as e:
        raise NestedFieldError("name", name, str(e)) from None


# ------------------------------------------------------------------------------------------ training
class OptimizerConfig(Strict):
    name: Literal["sgd", "adam"] = "sgd"
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)


class ScheduleConfig(Strict):
    """Learning rate at round t: constant, lr·gamma^t, or cosine from lr to 0 over the rounds."""

    name: Literal["constant", "exponential", "cosine"] = "constant"
    gamma: float = Field(0.99, gt=0, le=1)


class TrainConfig(Strict):
    rounds: int = Field(20, ge=1)
    clients_per_round: int | None = Field(None, ge=1, description="overrides fraction")
    fraction: float = Field(1.0, gt=0, le=1, description="share of clients sampled each round")
    local_epochs: int = Field(1, ge=1)
    local_steps: int | None = Field(None, ge=1, description="overrides local_epochs: batches sampled with replacement")
    batch_size: int = Field(32, ge=1)
    drop_last: bool = False
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    lr_schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    grad_clip: float | None = Field(None, gt=0)
    engine: Literal["auto", "sequential", "vectorized"] = Field(
        "auto", description="sequential: one client at a time (the reference); vectorized: each group of a round's "
        "clients (train.group_steps) trained together (torch.func); auto: vectorized where the method and model allow "
        "it, except, with clients on CPUs, for a recurrent model or one of over 200 k multiply-adds a sample (measured "
        "slower vectorised), else sequential. On either engine the history does not depend on the number of client "
        "actors")
    group_steps: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        "auto", description="the groups a round's clients train in: consecutive client ids, each group at most about "
        "this many optimizer steps a round in expectation; a group trains together in one process and its partial "
        "sum is taken alone, so the history depends on the groups, fixed by the config, not on the actors "
        "(orchestrator/clients/client_groups.py). Fewer steps: more groups to spread over actors, each a smaller batch; "
        "auto: orchestrator/clients/client_groups.py's small_round_steps (the round size resources.clients_on: auto "
        "trains in the coordinator): SMALL_ROUND_STEPS of the engine that runs, or LARGE_MODEL_ROUND_STEPS for a "
        "model of over 200 k multiply-adds a sample")
    on_nonfinite_loss: Literal["stop", "continue"] = Field(
        "stop", description="a client's training loss is NaN or infinite: stop the run (naming the round and "
                            "the client), or continue")


class PerClientEvalConfig(Strict):
    """The global model judged client by client (docs/fairness.md)."""

    enabled: bool = Field(False, description="evaluate the global model on every client's own test data (where the "
                          "clients are hosted) each evaluated round, and log its mean, worst 10 % and spread across "
                          "clients: client_accuracy, client_accuracy_mean, worst10_accuracy, client_accuracy_std "
                          "(a method without a global model logs none)")
    sample: int | None = Field(
        None, ge=1, description="evaluate this many clients, a sample drawn from the seed alone (the same clients "
        "for every method of a seed, and the same as eval.personalized_clients draws for the same number); "
        "null: every client")


class EvalConfig(Strict):
    every: int = Field(1, ge=1)
    batch_size: int = Field(1024, ge=1)
    diagnostics: bool = Field(False, description="log the cross-method diagnostics every round "
                              "(feature distance, classifier-update cosine, classifier movement: tasks/algorithms/diagnostics.py)")
    probe_per_class: int = Field(10, ge=1, description="probe images per class and test set for the feature distance")
    split: Literal["test", "validation"] = Field(
        "test", description="what every accuracy is measured on: the test sets, or the validation split "
        "(data.validation_fraction > 0), whose metrics are named val_accuracy, val_personalized_accuracy, ...; "
        "a sweep's trials evaluate on validation and never read the test sets")
    personalized_clients: int | None = Field(
        None, ge=1, description="personalized methods: evaluate the own models of this many clients, a sample drawn "
        "from the seed alone (the same for every method of a seed); null: every client")
    per_client: PerClientEvalConfig = Field(default_factory=PerClientEvalConfig)
    global_test: bool = Field(
        True, description="personalized methods: also score each evaluated client's own model on the global test set "
        "(FedNH's PM(L) and PM(V), docs/methods/fednh.md); false skips it where nothing reads those metrics: it "
        "costs every evaluated client a pass over the whole test set")


class ResourcesConfig(Strict):
    num_actors: int | None = Field(None, ge=1, description="default: as many as the cluster's resources hold")
    cpus_per_actor: float = Field(1.0, gt=0)
    gpus_per_actor: float = Field(0.0, ge=0, le=1, description="fraction of a GPU per client actor")
    max_actors: int = Field(64, ge=1, description="upper bound when num_actors is derived from resources")
    actor_start_timeout: float = Field(600.0, gt=0, description="seconds to wait for client actors to be placed")
    warm_up: bool = Field(True, description="while the run starts, one throwaway local step of two clients together "
                          "and of one alone, on copies, wherever clients train, so that the first round pays no first-use costs (torch's first "
                          "optimizer, the first torch.func trace, lazy imports); the history is the same without it "
                          "(orchestrator/clients/warm_up.py)")
    resident_clients: int | None = Field(
        1024, ge=1, description="client states (and data shards) a client actor keeps in memory (least recently used out first); "
        "every state is also written to the run directory when its client's round ends and read back from there "
        "when it is sampled again; null: keep all in memory")
    clients_on: Literal["auto", "actors", "coordinator"] = Field(
        "auto", description="where the clients train: on client actors, or in the coordinator's process (no Ray call "
        "per round: faster for small rounds); auto: the coordinator when a round is small (at most "
        "orchestrator/clients/client_groups.py's small_round_steps optimizer steps in all) and no GPU is asked for, "
        "else actors. "
        "The history is the same as on any number of client actors (train.group_steps)")
    evaluate_on: Literal["auto", "coordinator", "client_actors"] = Field(
        "auto", description="where the global model is evaluated when the clients train on client actors: in the "
        "coordinator (beside the next round's training, where a round begins ahead), or split over the client "
        "actors, each counting its share of the test sets before its part of the next round's training; auto: on "
        "a client actor's GPU where the actors have GPUs, split over the actors for a model of over 200 k "
        "multiply-adds a sample whose CPU "
        "actors hold every CPU of the cluster (the coordinator's evaluation would take a core from their "
        "training), else the coordinator. The accuracies do not depend on it")
    rounds_per_call: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        "auto", description="rounds the driver asks of the coordinator in one Ray call; auto: as many as took about "
        "orchestrator/driver/round_loop.py's CALL_SECONDS (a call costs a fraction of a millisecond, which rounds of a few "
        "milliseconds feel), never past a due checkpoint, and before that is known one (FIRST_CALL_SMALL_ROUNDS where "
        "clients_on: auto put the clients in the coordinator). The history does not depend on it; a stop signal "
        "waits for the calls in flight")
    partial_sums: bool = Field(True, description="each group of a round's clients (train.group_steps) comes back "
                               "as the sample-weighted sum of its models, not each model, where the method declares "
                               "that it averages them as FedAvg does (Capabilities.averages_models) and no per-client "
                               "model is read (eval.diagnostics); other methods send each model "
                               "(docs/design.md, \"How it runs\")")


# -------------------------------------------------------------------------------------- participation
class AvailabilityConfig(Strict):
    """Which clients can be sampled when a round starts (orchestrator/server/participation.py; docs/participation.md)."""

    kind: Literal["always", "bernoulli", "diurnal", "trace"] = "always"
    probability: float = Field(0.8, gt=0, le=1, description="bernoulli: chance a client is available in a round")
    period: float = Field(86400.0, gt=0, description="diurnal: simulated seconds of one day")
    online_fraction: float = Field(0.5, gt=0, le=1, description="diurnal: share of the day a client is online, "
                                   "from a phase drawn per client")
    trace: str | None = Field(None, description="trace: JSON file {client id: [[start, end], ...]} of availability "
                              "intervals in simulated seconds; a client it does not list is never available")
    trace_period: float | None = Field(None, gt=0, description="trace: the trace repeats with this period; "
                                       "null: it does not")


class SpeedConfig(Strict):
    """Local optimizer steps per simulated second: median × exp(sigma·z), z standard normal from (seed, client)."""

    median: float = Field(10.0, gt=0)
    sigma: float = Field(0.0, ge=0, description="log-normal spread; 0: every client the same")


class BandwidthConfig(Strict):
    """Bytes per simulated second, down and up: median × exp(sigma·z), z standard normal from (seed, client)."""

    median: float = Field(1e6, gt=0)
    sigma: float = Field(0.0, ge=0, description="log-normal spread; 0: every client the same")


class SystemConfig(Strict):
    """Each client's compute speed and bandwidth, fixed for the run."""

    speed: SpeedConfig = Field(default_factory=SpeedConfig)
    bandwidth: BandwidthConfig = Field(default_factory=BandwidthConfig)
    trace: str | None = Field(None, description="CSV file with columns client,speed,bandwidth, one row per client; "
                              "replaces the draws")
    slow_classes: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list, description="classes whose holders are slow: a client's "
                                    "speed and bandwidth are multiplied by 1 - (1 - slow_factor) × its share of "
                                    "training samples in these classes")
    slow_factor: float = Field(1.0, gt=0, le=1)


class BufferConfig(Strict):
    """Buffered asynchronous aggregation (FedBuff): a new global version every `size` arrivals."""

    size: int = Field(5, ge=1, description="arrivals folded into each new version")
    concurrency: int = Field(10, ge=1, description="clients training at any time")
    staleness: Literal["constant", "polynomial"] = Field(
        "polynomial", description="weight of an update s versions old: 1, or (1 + s)^-exponent")
    exponent: float = Field(0.5, ge=0)
    server_lr: float = Field(1.0, gt=0, description="the new version is old + server_lr × weighted mean delta")


class ParticipationConfig(Strict):
    """Clients as they are: availability, speeds, deadlines, dropouts, on a simulated clock. At its defaults every
    client is available and answers at once (no clock); any other value runs the simulation
    (docs/participation.md)."""

    availability: AvailabilityConfig = Field(default_factory=AvailabilityConfig)
    system: SystemConfig = Field(default_factory=SystemConfig)
    deadline: float | None = Field(None, gt=0, description="simulated seconds a round waits for its clients")
    over_selection: float = Field(0.0, ge=0, description="sample ceil((1 + this) × clients per round) available "
                                  "clients and keep the first clients-per-round to finish")
    dropout: float = Field(0.0, ge=0, lt=1, description="chance a selected client drops out mid-round")
    idle_seconds: float = Field(60.0, gt=0, description="simulated seconds a round with no client available takes")
    target_accuracy: float | None = Field(None, gt=0, le=1, description="report the simulated time to reach it")
    mode: Literal["sync", "buffered"] = "sync"
    buffer: BufferConfig = Field(default_factory=BufferConfig)

    @property
    def active(self) -> bool:
        return self != ParticipationConfig()

    @model_validator(mode="after")
    def traces_readable(self) -> ParticipationConfig:
        from orchestrator.experiment.participation_settings import (
            TraceError,
            read_availability_trace,
            read_system_trace,
        )

        for key, path, read in (("availability.trace", self.availability.trace, read_availability_trace),
                                ("system.trace", self.system.trace, read_system_trace)):
            if path is not None:
                try:
                    read(path)
                except TraceError as e:
                    raise NestedFieldError(key, path, str(e)) from None
        if self.availability.kind == "trace" and self.availability.trace is None:
            raise NestedFieldError("availability.trace", None, "availability.kind = trace needs a trace file")
        return self


class TrackingConfig(Strict):
    enabled: bool = True
    uri: str | None = Field(None, description="MLflow tracking URI; MLFLOW_TRACKING_URI or MLflow's default otherwise")
    experiment: str = "mooring"


class CheckpointConfig(Strict):
    every: Annotated[int, Field(ge=0)] | Literal["auto"] = Field(
        "auto", description="rounds between checkpoints; 0: only at the end; auto: a checkpoint once `auto_seconds` "
                            "have passed since the previous one (or the start), and after the last round")
    auto_seconds: float = Field(30.0, gt=0, description="with every: auto, the seconds of rounds between checkpoints")
    dir: StorageLocation = Field("runs", description="local path or pyarrow.fs URI under which run directories live")


class AdaptiveClipConfig(Strict):
    """Quantile-based adaptive clipping (Andrew et al. 2021); docs/privacy.md."""

    target_quantile: float = Field(0.5, gt=0, lt=1, description="γ: the share of updates the norm should let through")
    learning_rate: float = Field(0.2, gt=0, description="η of the geometric step C ← C·exp(−η(b̃ − γ))")
    count_noise_multiplier: NoiseMultiplier | None = Field(
        None, description="σ_b on the count of updates within C; null: clients per round / 20 (the paper's)")


class ModelPrivacyConfig(Strict):
    """DP-FedAvg: each client's update clipped to `clip`, noise of std noise_multiplier·clip on the sum."""

    clip: float | None = Field(None, gt=0, description="C: ℓ2 bound of an update θ_k − θ (the initial C if adaptive); "
                               "null: no clipping, no noise")
    noise_multiplier: NoiseMultiplier = Field(0.0, description="z: noise std z·C on the sum, at the server")
    local_noise_multiplier: NoiseMultiplier = Field(0.0, description="noise std ·C on each update, at its client")
    adaptive: AdaptiveClipConfig | None = None


class StatsPrivacyConfig(Strict):
    """Per-class feature sums and counts: features clipped to `clip`, noise added on the client."""

    clip: float | None = Field(None, gt=0, description="ℓ2 bound of each feature summed; null: no clipping, no noise")
    noise_multiplier: NoiseMultiplier = Field(0.0, description="σ: noise std σ·clip per sum entry, σ per count")


class PrivacyConfig(Strict):
    """Off by default (docs/privacy.md). ε for `delta` is logged every round where there is noise."""

    delta: float = Field(1e-5, gt=0, lt=1, description="δ of the (ε, δ) reported")
    models: ModelPrivacyConfig = Field(default_factory=ModelPrivacyConfig)
    stats: StatsPrivacyConfig = Field(default_factory=StatsPrivacyConfig)

    @model_validator(mode="after")
    def noise_needs_clip(self) -> PrivacyConfig:
        m, s = self.models, self.stats
        if m.clip is None and (m.noise_multiplier or m.local_noise_multiplier or m.adaptive):
            raise NestedFieldError("models.clip", None, "noise or adaptive clipping needs a clipping norm (> 0)")
        if s.clip is None and s.noise_multiplier:
            raise NestedFieldError("stats.clip", None, "noise needs a clipping norm (> 0)")
        return self

    def settings(self, clients_per_round: int):
        """The plain values the mechanisms take (tasks/privacy/settings.py)."""
        from tasks.privacy.settings import AdaptiveClipping, ModelDP, Privacy, StatsDP

        m, a = self.models, self.models.adaptive
        adaptive = None if a is None else AdaptiveClipping(
            a.target_quantile, a.learning_rate,
            clients_per_round / 20 if a.count_noise_multiplier is None else a.count_noise_multiplier)
        return Privacy(self.delta, ModelDP(m.clip, m.noise_multiplier, m.local_noise_multiplier, adaptive),
                       StatsDP(self.stats.clip, self.stats.noise_multiplier))


class ClaimCheck(Strict):
    """One of a paper's statements, judged on paired per-seed differences (method − baseline, same split)."""

    statement: str
    setting: str = "default"
    method: str
    baseline: str
    metric: str | None = Field(None, description="overrides the claims block's metric")
    expect: Literal["better", "worse"] = "better"
    min_wins: int | None = Field(None, ge=0, description="seeds the method must win; default: ceil(0.8 × seeds)")
    max_p: float | None = Field(None, gt=0, le=1, description="also require a one-sided paired t-test p below this")


class ClaimsBudget(Strict):
    """Another budget of the same protocol (`mooring claims --budget NAME`), e.g. the spec's full one."""

    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted keys set on every run")
    seeds: list[int] | None = Field(None, description="replace the protocol's seeds")
    settings: dict[str, dict[str, Any]] | None = Field(None, description="replace the protocol's settings")


class ClaimsConfig(Strict):
    """A paper's small-scale protocol: settings × methods × seeds, and the statements to check.

    `mooring run` ignores this block and runs the experiment above it; `mooring claims` runs the protocol.
    Metrics are "KEY:AGG": KEY a history metric (accuracy, accuracy_worst, personalized_accuracy, ...), AGG one
    of final, best, last5, top5, last5_sync (pipelines/compare.py)."""

    title: str
    spec: str = ""
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    metric: str = "accuracy:final"
    settings: dict[str, dict[str, Any]] = Field(default_factory=lambda: {"default": {}})
    methods: dict[str, dict[str, Any]]
    checks: list[ClaimCheck] = Field(default_factory=list)
    budgets: dict[str, ClaimsBudget] = Field(default_factory=dict, description="named alternatives to the default "
                                             "(short) budget; `full` is the spec's protocol")
    notes: str = ""


class ExperimentConfig(Strict):
    name: str = Field("default", description="the run directory's name starts with it: letters, digits, . _ + -")
    seed: Seed = 0
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    participation: ParticipationConfig = Field(default_factory=ParticipationConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    threat: ThreatConfig | None = Field(None, description="malicious clients and their attack; null: none")
    claims: ClaimsConfig | None = None

    @field_validator("name")
    @classmethod
    def name_not_path(cls, v: str) -> str:
        if not RUN_NAME.fullmatch(v):
            raise ValueError("must be a name, not a path: 1-128 letters, digits, '.', '_', '+' or '-', "
                             "starting with a letter or digit")
        return v

    @model_validator(mode="after")
    def validation_split_exists(self) -> ExperimentConfig:
        if self.eval.split == "validation" and self.data.validation_fraction == 0:
            raise NestedFieldError("eval.split", "validation", "needs a validation split: set "
                                   "data.validation_fraction (for example 0.2)")
        return self

    @model_validator(mode="after")
    def participation_fits(self) -> ExperimentConfig:
        k = self.train.clients_per_round
        if k is not None and k > self.data.num_clients:
            raise NestedFieldError("train.clients_per_round", k,
                                   f"more clients per round than data.num_clients = {self.data.num_clients}")
        k = self.eval.personalized_clients
        if k is not None and k > self.data.num_clients:
            raise NestedFieldError("eval.personalized_clients", k,
                                   f"more clients to evaluate than data.num_clients = {self.data.num_clients}")
        k = self.eval.per_client.sample
        if k is not None and k > self.data.num_clients:
            raise NestedFieldError("eval.per_client.sample", k,
                                   f"more clients to evaluate than data.num_clients = {self.data.num_clients}")
        self.participation_covers_clients()
        if self.resources.clients_on == "coordinator" and self.resources.gpus_per_actor > 0:
            raise NestedFieldError("resources.clients_on", "coordinator", "the coordinator has no GPU: clients that "
                                   "train on GPUs (resources.gpus_per_actor > 0) need clients_on: actors or auto")
        if self.participation.active and self.privacy_settings.active:
            raise NestedFieldError("participation", self.participation.mode, "the privacy accountant assumes "
                                   "clients_per_round sampled uniformly without replacement, which availability, "
                                   "deadlines and dropouts change; run the privacy block without a participation block")
        if self.participation.mode == "buffered":
            from orchestrator.experiment.participation_settings import buffered_refusal
            from tasks.algorithms import ALGORITHMS

            refusal = buffered_refusal(ALGORITHMS.get(self.algorithm.name))
            if refusal:
                raise NestedFieldError("participation.mode", "buffered", f"{refusal}; buffered aggregation runs "
                                       "methods that average models as FedAvg does (fedavg, fedprox)")
        return self

    def participation_covers_clients(self) -> None:
        """The traces name the federation's clients and only them: a row for each in the system trace, and no id
        past data.num_clients in either (such a client would never be sampled; docs/participation.md)."""
        from orchestrator.experiment.participation_settings import (
            clients_outside,
            read_availability_trace,
            read_system_trace,
        )

        trace = self.participation.system.trace
        rows = read_system_trace(trace) if trace else {}
        stranger = clients_outside(rows, self.data.num_clients) if trace else None
        if stranger:
            raise NestedFieldError("participation.system.trace", trace, stranger)
        missing = sorted(set(range(self.data.num_clients)) - set(rows)) if trace else []
        if missing:
            raise NestedFieldError("participation.system.trace", trace,
                                   f"no row for client {missing[0]} (one row per client 0 .. {self.data.num_clients - 1})")
        trace = self.participation.availability.trace
        stranger = clients_outside(read_availability_trace(trace), self.data.num_clients) if trace else None
        if stranger:
            raise NestedFieldError("participation.availability.trace", trace, stranger)

    @model_validator(mode="after")
    def method_settings_fit(self) -> ExperimentConfig:
        """The optimizer, averaging, server optimiser and calibration the named method can take, then the aggregator
        and the attack it, the participation and the privacy block can take."""
        from orchestrator.experiment.method_settings import method_settings_refusal
        from orchestrator.experiment.robust_settings import robustness_refusal

        for refusal in (method_settings_refusal, robustness_refusal):
            key, value, problem = refusal(self)
            if problem:
                raise NestedFieldError(key, value, problem)
        return self

    @model_validator(mode="after")
    def privacy_fits(self) -> ExperimentConfig:
        from tasks.privacy.coverage import refusal

        key, value, problem = refusal(self.algorithm.block_name, self.privacy_settings, self.clients_per_round)
        if problem:
            raise NestedFieldError(key, value, problem)
        return self

    @property
    def privacy_settings(self):
        return self.privacy.settings(self.clients_per_round)

    @property
    def clients_per_round(self) -> int:
        if self.train.clients_per_round is not None:
            return self.train.clients_per_round
        return max(1, round(self.train.fraction * self.data.num_clients))

    @property
    def reads_each_update(self) -> bool:
        """Whether the server needs each client's update rather than their sum: a robust aggregator, or an attack
        on the updates (orchestrator/server/robust_round.py)."""
        aggregator, threat = self.algorithm.aggregator, self.threat
        return (aggregator is not None and aggregator.reads_updates) or (threat is not None and not threat.poisons_data)

    @property
    def split_seed(self) -> int:
        return self.seed if self.data.split_seed is None else self.data.split_seed

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# ------------------------------------------------------------------------------------ loading, errors
def printable(text: str) -> str:
    """Control characters escaped, so a message stays on one line whatever the YAML held."""
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text


def shown(value: Any) -> str:
    """repr(value) for a message; Python prints no integer past 4,300 digits, so such a value is described."""
    if isinstance(value, int) and value.bit_length() > 4000:
        return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
    try:
        return repr(value)
    except ValueError:
        return f"<a {type(value).__name__} holding an integer too long to print>"


def schema_models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's annotation can hold: itself, a union's members, an Optional's or a list's
    or a dict's values."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return schema_models(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType, list, dict, tuple):
        args = typing.get_args(annotation)
        members = args[1:] if origin is dict else args
        return [m for arg in members for m in schema_models(arg)]
    return []


def nearest_key(schema: type[BaseModel], loc: tuple) -> str | None:
    """The valid dotted key closest to the unknown one at `loc` (the same path with its last part respelled), or
    None when none is close. Parts that name no field (a list index, a union's tag) keep the models in hand."""
    models = [schema]
    for part in loc[:-1]:
        fields = [m.model_fields[part] for m in models if isinstance(part, str) and part in m.model_fields]
        if fields:
            models = [m for f in fields for m in schema_models(f.annotation)]
        else:
            tagged = [m for m in models if str(part) in m.__name__.lower() or any(
                typing.get_args(f.annotation) == (part,) for f in m.model_fields.values())]
            models = tagged or models
        if not models:
            return None
    keys = sorted({k for m in models for k in m.model_fields})
    near = difflib.get_close_matches(str(loc[-1]), keys, n=1, cutoff=0.7)
    return ".".join([*(str(p) for p in loc[:-1]), near[0]]) if near else None


def format_validation_error(err: ValidationError, source: str, schema: type[BaseModel] | None = None) -> str:
    """The first problem of a pydantic error as one line: field, value given, what is allowed; an unknown key
    names the nearest valid one of `schema` where one is close."""
    e = err.errors()[0]
    where = printable(".".join(str(p) for p in e["loc"])) or "(top level)"
    msg = e["msg"].removeprefix("Value error, ")
    nested = (e.get("ctx") or {}).get("error")
    if isinstance(nested, NestedFieldError):
        outer = where if where != "(top level)" else ""
        path = ".".join(p for p in (outer, printable(nested.path)) if p)
        msg = nested.msg
        if nested.near:
            msg = f"unknown key; did you mean '{'.'.join(p for p in (outer, printable(nested.near)) if p)}'?"
        return f"{source}: {path} = {shown(nested.value)}: {msg}"
    if e["type"] == "extra_forbidden":
        near = nearest_key(schema, e["loc"]) if schema is not None else None
        hint = f"did you mean '{printable(near)}'?" if near else "check the spelling against `mooring config show`"
        return f"{source}: unknown key '{where}' (value {shown(e['input'])}); {hint}"
    if e["type"] == "literal_error":
        return f"{source}: {where} = {shown(e['input'])}: {msg}"
    value = e.get("input")
    if isinstance(value, dict):
        return f"{source}: {where}: {msg}"
    return f"{source}: {where} = {shown(value)}: {msg}"


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, for example --set train.rounds=5")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text!r}: the key must be a dotted path such as data.partition.alpha")
    try:
        value = safe_yaml.load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    except safe_yaml.YamlRefused as e:
        raise ConfigError(f"--set {key}=...: value refused: {e}") from None
    return key.split("."), value


# settings given as a bare name or as a block with that name (AggregatorConfig.bare_name)
NAME_OR_BLOCK = frozenset({"algorithm.aggregator"})


def set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    """Set `raw[a][b][c]` to a copy of `value` for key "a.b.c", creating sections as needed. A copy: a block given
    as one value (a table row's `algorithm.aggregator: {...}`) would otherwise become the section that a later key
    ("algorithm.aggregator.f") writes into, changing the caller's value for every config made from it after."""
    *sections, leaf = key.split(".")
    node = raw
    for depth, part in enumerate(sections):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if isinstance(child, str) and ".".join(sections[:depth + 1]) in NAME_OR_BLOCK:
            child = node[part] = {"name": child}  # `aggregator: median`, then one of its settings
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}=...: '{part}' is a value, not a section")
        node = child
    node[leaf] = copy.deepcopy(value)


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for text in overrides:
        path, value = parse_override(text)
        set_dotted(raw, ".".join(path), value)
    return raw


def digest(data: Any) -> str:
    """16 hex digits of the sha256 of `data` as JSON with sorted keys: equal for equal dumps, whatever their
    keys' order (a stored partition's name, a row's or a sweep's fingerprint)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config file ({e.strerror or e})") from None
    return parse_yaml_mapping(text, path)


def parse_yaml_mapping(text: str, path: str | Path) -> dict[str, Any]:
    """YAML text → the top-level mapping; plain data only (a `!!python/...` tag is an error), bounded in depth
    and in what its aliases expand to (orchestrator/experiment/safe_yaml.py)."""
    try:
        raw = safe_yaml.load(text)
    except safe_yaml.YamlRefused as e:
        raise ConfigError(f"{path}: YAML refused: {e}") from None
    except yaml.constructor.ConstructorError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: refused YAML tag{where} ({e.problem}); only plain data (mappings, lists, "
                          "strings, numbers) is read") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ConfigError(f"{path}: YAML syntax error{where}: {problem}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(raw).__name__}")
    return raw


def build_config(raw: dict[str, Any], source: str = "config") -> ExperimentConfig:
    try:
        return ExperimentConfig(**raw)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source, ExperimentConfig)) from None
    except TypeError as e:
        raise ConfigError(f"{source}: {e}") from None


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    raw = read_yaml(path) if path is not None else {}
    source = str(path) if path is not None else "config"
    return build_config(apply_overrides(raw, list(overrides)), source)


def with_overrides(cfg: ExperimentConfig, overrides: dict[str, Any]) -> ExperimentConfig:
    """A copy of `cfg` with dotted-key overrides applied and re-validated (compare, sweeps)."""
    raw = cfg.to_dict()
    for key, value in overrides.items():
        set_dotted(raw, key, value)
    return build_config(raw, "config")


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
