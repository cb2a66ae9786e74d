"""FedProto (Tan et al., AAAI 2022) as the FedSA code runs it (HtFLlib; docs/methods/fedsa.md §1, §4, §10), and the
heterogeneous-model machinery FedSA builds on.

- Private, heterogeneous models (§1): client i trains architecture `family_member(family, i)` (or, with
  `homogeneous_model`, the config's model) with its own head; same-architecture clients start from the same
  weights, seeded from setup.seed (the code's seed 0 per client). The model is kept in the client state as a
  state dict and rebuilt in a per-process model per architecture. Model weights never leave a client.
- Local loss (Eq. 4, the code): CE + λ·MSE(f, P̄^y), the MSE averaged over batch and D; a sample whose class has
  no global prototype adds nothing (the code copies its own feature as the target).
- Upload (§4.2 step 4, §10.9): the per-class means of the detached features seen during this round's training
  (train mode), only for the classes the client holds, plus the per-class feature counts: nothing else.
- Server (§4.1 d): per class, the unweighted mean over this round's clients that hold it; it replaces the global
  prototypes, so a class that no participant holds has none until it reappears (the code).
- Evaluation (§4.3, §10.10, §10.14): every client's private model on its own test split, sample-weighted, by
  "head" (argmax of its head), "proto" (nearest global prototype, the code's rule) and, in FedSA, "anchor".
  The HEADLINE "acc" is "proto", the rule the code reports; before the first aggregation it scores 0.

Engines: the loss is a `local_loss`, and the features met in training are recorded by whichever engine trains
(`LocalObjective.record_seen`), so FedProto trains on the vectorized engine too, one batch of clients per
architecture (`model_key`); a family member with BatchNorm or dropout keeps it on the sequential one.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from pydantic import Field, field_validator

from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    ClientUpdate,
    HyperParams,
    LocalObjective,
    RoundContext,
    batch_mean,
    cross_entropy,
    evaluating,
    searchable,
    state_of,
)
from tasks.algorithms.engines import model_refusal
from tasks.algorithms.prototypes import (
    mean_nearest_neighbour_distance,
    mean_of_present,
    nearest_prototype,
)
from tasks.algorithms.registry import register
from tasks.models import MODELS, FLModel
from tasks.models.family import MODEL_FAMILIES, family_member
from tasks.privacy.class_stats import released


class PrivateModelParams(HyperParams):
    family: str = Field("fedsa_digits", description="model family: client i trains member i mod its size")
    homogeneous_model: bool = Field(False, description="every client trains the config's model (homogeneous control)")

    @field_validator("family")
    @classmethod
    def known_family(cls, v: str) -> str:
        if v not in MODEL_FAMILIES:
            raise ValueError(f"unknown model family; allowed: {', '.join(sorted(MODEL_FAMILIES))}")
        return v


class FedProtoParams(PrivateModelParams):
    lam: float = searchable(10.0, 0.01, 100.0, log=True, ge=0,
                            description="λ: weight of MSE(f, P̄^y) (10 in the FedSA scripts, 0.1 in FedNH's)")


def mse_over_batch_and_dim(h: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """F.mse_loss(h, target); with 0/1 weights, over the real samples only (base.batch_mean)."""
    if weight is None:
        return F.mse_loss(h, target)
    return batch_mean(((h - target) ** 2).mean(dim=1), weight)


def fedproto_loss(h: torch.Tensor, y: torch.Tensor, prototypes: torch.Tensor, mask: torch.Tensor,
                  weight: torch.Tensor | None = None) -> torch.Tensor:
    """MSE(h, P̄^y) over batch and D, where a class without a global prototype targets the feature itself."""
    target = torch.where(mask[y].unsqueeze(1), prototypes[y], h.detach())
    return mse_over_batch_and_dim(h, target, weight)


def rows_by_class(stats: dict, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An upload's prototypes spread to C rows (zeros where absent) and the mask of the classes it holds."""
    held = stats["counts"] > 0
    rows = torch.zeros(num_classes, stats["protos"].shape[1], dtype=stats["protos"].dtype)
    rows[held] = stats["protos"]
    return rows, held


@register
class FedProto(Algorithm):
    name = "fedproto"
    Params = FedProtoParams
    personalized = True
    has_global_model = False

    def __init__(self, params, setup):
        super().__init__(params, setup)
        self.architectures = sorted({self.architecture(i) for i in range(setup.num_clients)})
        dims = {a: self.private_model(a).feature_dim for a in self.architectures}
        if len(set(dims.values())) != 1:
            raise ValueError(f"{self.name}: the clients' models must share one feature_dim, got {dims}")
        self.feature_dim = next(iter(dims.values()))

    # ------------------------------------------------------------------ private models
    def architecture(self, client_id: int) -> str:
        if self.params.homogeneous_model:
            return self.setup.model_name
        return family_member(self.params.family, client_id)

    def member_options(self, arch: str) -> dict:
        """The config model's options that this architecture declares (feature_dim, classifier_bias, ...)."""
        declared = MODELS.get(arch).params.model_fields
        return {k: v for k, v in self.setup.model_options.items() if k in declared}

    def private_model(self, arch: str, state=None, device=None) -> FLModel:
        """The per-process working model of one architecture, loaded with a client's state dict."""
        model = self._model_cache.get(arch)
        if model is None:
            model = self._model_cache[arch] = self.new_model(name=arch, options=self.member_options(arch))
        if device is not None:
            model.to(device)
        if state is not None:
            model.load_state_dict(state)
        return model

    def working_model(self, state=None, key="global", device=None) -> FLModel:
        """An architecture's model where `key` names one (the engines' model_key), else the base's."""
        if key in self.architectures:
            return self.private_model(key, state, device)
        return super().working_model(state, key, device)

    def vectorized_refusal(self) -> str:
        return next(filter(None, (model_refusal(self.private_model(a)) for a in self.architectures)), "")

    # ------------------------------------------------------------------ server half
    def init_global(self):
        return {"protos": torch.zeros(self.num_classes, self.feature_dim),
                "proto_mask": torch.zeros(self.num_classes, dtype=torch.bool)}

    def payload(self, state, round_idx):
        return {"protos": state["protos"], "proto_mask": state["proto_mask"]}

    def aggregate(self, state, updates: list[ClientUpdate], round_idx: int):
        if not updates:
            return state
        rows, masks = zip(*(rows_by_class(u.stats, self.num_classes) for u in updates))
        protos, mask = mean_of_present(list(rows), list(masks))
        return {**state, "protos": protos, "proto_mask": mask}

    def round_metrics(self, state, updates, round_idx):
        """Mean nearest-neighbour distance of the global prototypes (claim (d) of docs/methods/fedsa.md §11)."""
        return {"prototype_margin": mean_nearest_neighbour_distance(state["protos"][state["proto_mask"]])}

    # ------------------------------------------------------------------ client half
    def init_client(self, data: ClientData):
        arch = self.architecture(data.client_id)
        return {"model": state_of(self.new_model(name=arch, options=self.member_options(arch)))}

    def local_objective(self, payload, data: ClientData, client_state, ctx: RoundContext):
        inputs = {k: payload[k].to(ctx.device) for k in ("protos", "proto_mask")}
        return LocalObjective(start=client_state["model"], inputs=inputs, model_key=self.architecture(data.client_id),
                              record_seen=True,  # the prototypes are the features met in training (§4.2 step 4)
                              record_clip=self.setup.stats_privacy.clip)

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        return cross_entropy(logits, y, weight) + self.regularisation(params, h, y, inputs, weight)

    def regularisation(self, params, h, y, inputs, weight=None):
        """λ·MSE(f, P̄^y) (Eq. 4): the term added to the cross-entropy."""
        return self.params.lam * fedproto_loss(h, y, inputs["protos"], inputs["proto_mask"], weight)

    def client_result(self, trained, train_loss, payload, data: ClientData, client_state, ctx: RoundContext):
        seen = ctx.recorded
        sums, counts = released(seen.sums, seen.counts, self.setup.stats_privacy, ctx, data.client_id)
        held = counts > 0  # under privacy.stats, the classes whose noised count rounds to ≥ 1
        means = sums / counts.clamp_min(1.0).unsqueeze(1)
        stats = {"protos": means[held].float(), "counts": counts.float()}
        update = ClientUpdate(data.client_id, data.num_samples, stats=stats, metrics={"train_loss": train_loss})
        return update, {**client_state, "model": trained}

    # ------------------------------------------------------------------ personalized evaluation
    def prediction_rules(self, payload) -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
        """rule -> (features, logits) -> predicted labels."""
        protos, mask = payload["protos"], payload["proto_mask"]
        return {"head": lambda h, logits: logits.argmax(dim=1),
                "proto": lambda h, logits: nearest_prototype(h, protos, mask)}

    def client_evaluate(self, payload, data: ClientData, client_state, ctx: RoundContext):
        model = self.private_model(self.architecture(data.client_id), client_state["model"], ctx.device)
        h, logits = eval_outputs(model, data.x_test.to(ctx.device))
        y = data.y_test.to(h.device)
        out = {rule: (int((predict(h, logits) == y).sum()), len(y))
               for rule, predict in self.prediction_rules(payload).items()}
        return {"acc": out["proto"], **out}  # the headline: the code's rule


@torch.no_grad()
def eval_outputs(model: FLModel, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Features and logits in eval mode (BatchNorm on running statistics), one forward pass."""
    with evaluating(model):
        return model(x, return_features=True)
