"""FedNH (Dai et al., AAAI 2023): FedAvg on the body plus a non-parametric head of unit class prototypes.

docs/methods/fednh.md:
- §2: the body's features are ℓ2-normalised (a final ReLU before it is the body's own flag, `final_relu` on
  `mlp`: the positive-orthant pitfall of §11.9); the head is bias-free, its rows are the unit class prototypes
  W, and logits = s·W f. s is fixed, or (`learn_scale`, the code) trained locally and averaged like a body weight.
- §2.2: W⁰ spread on the sphere once on the server, seeded from setup.seed: `orthogonal` rows (the code and the
  §12.1 protocol, default) or `simplex`, the solution of Eq. (1) (closed-form regular simplex for C ≤ d + 1,
  solved numerically beyond it).
- §3: clients train the body (and s) with plain cross-entropy over all classes, W frozen (no gradient, no weight
  decay); then they send the body, the per-class sums n_kc·μ̂_kc of their unit class means of normalised
  features (final body, eval mode, all training samples) and the class counts n_kc.
- §4: the server averages the bodies uniformly (Alg. 1 and the code, not by sample count) and moves W by the
  code's class-wise rule (prototypes.smoothed_prototype_update); a class that no participant holds is unchanged.
- §5: the global model (GM) is (θ^{t+1}, W^{t+1}, s), evaluated by the server. The personalized model of a client
  (`personal_model`, tasks/algorithms/personal.py) is by default §12.1's: one local update from the current global
  model, W frozen, trained for the evaluation and not kept; `latest` is its latest local model (θ_k, the W it
  trained against, its s) from its last participation, kept in its state (§5.1, the authors' code).

Personalized metrics (client_evaluate): "acc", the HEADLINE, is the personalized model's accuracy on the client's
own test split (the framework's personalized accuracy, comparable with Local, FedProto and FedSA); "pm_l" and
"pm_v" are the paper's PM(L) and PM(V) on the global test set, weighted per class by the client's training label
frequencies / by the presence of the class in its training set. The paper's PM is the mean over clients:
`personalized_pm_v_client_mean`, with its fairness spread `personalized_pm_l_client_std`.

Also here, for the §12 comparisons under the same §5 protocol: `fedavg_pm` (FedAvg with the same personalized model
rule) and `local_pm` (Local, its own model), both reporting acc / pm_l / pm_v.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    ClientUpdate,
    RoundContext,
    class_feature_stats,
    searchable,
    seeded_generator,
    state_of,
    weighted_average,
)
from tasks.algorithms.fedavg import FedAvg
from tasks.algorithms.local import Local
from tasks.algorithms.personal import PersonalEvalParams, PersonalizedModel, personalized_accuracies
from tasks.algorithms.prototypes import (
    initial_prototypes,
    mean_nearest_neighbour_distance,
    smoothed_prototype_update,
)
from tasks.algorithms.registry import register
from tasks.models import FLModel
from tasks.privacy.class_stats import released

PROTOTYPES = "classifier.weight"
SCALE = "classifier.scale"
PROTOTYPE_STREAM = 0x9D4


class FedNHParams(PersonalEvalParams):
    rho: float = searchable(0.9, 0.1, 0.9, ge=0, le=1,
                            description="ρ: weight kept on the old prototype in Eq. (4) (1 = FedUH, never updated)")
    scale: float = Field(1.0, gt=0, description="s: the logits' scale; its initial value when learn_scale (the "
                         "code's CNN starts at 1.0; the paper fixes s ≈ 30, the §12.1 protocol s = 10)")
    learn_scale: bool = Field(True, description="train s locally and average it like a body weight (the code); "
                              "false: s fixed (the paper)")
    init: Literal["orthogonal", "simplex"] = Field(
        "orthogonal", description="W⁰: orthonormal rows (the code, §12.1) or Eq. (1)'s simplex / numerical solution")


# ------------------------------------------------------------------------------------------- model
class PrototypeHead(nn.Linear):
    """logits = s·W h: a bias-free head whose rows are the frozen unit class prototypes W."""

    def __init__(self, dim: int, num_classes: int, scale: float, learn_scale: bool):
        super().__init__(dim, num_classes, bias=False)
        self.weight.requires_grad_(False)
        self.scale = nn.Parameter(torch.tensor(float(scale)), requires_grad=learn_scale)

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.weight)  # the server sets W⁰; no draw from the global RNG

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.scale * F.linear(h, self.weight)


class NormalizedBodyModel(FLModel):
    """A body's features, ℓ2-normalised (norm clamped at 1e-12), under a PrototypeHead."""

    def __init__(self, body: FLModel, head: PrototypeHead):
        super().__init__()
        del body.classifier  # FedNH's head replaces it; it is neither trained nor sent
        self.body = body
        self.classifier = head
        self.feature_dim = body.feature_dim
        self.num_classes = head.out_features

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.body.features(x), dim=1, eps=1e-12)


# ----------------------------------------------------------------------- personalized evaluation (§5)
class LatestLocalModelEvaluation:
    """Personalized model = the client's latest local model (its state's "model"), else the global model (Local)."""

    personalized = True
    keeps_client_state = True

    def client_evaluate(self, payload, data: ClientData, client_state, ctx: RoundContext):
        state = client_state.get("model", payload.get("model"))
        return personalized_accuracies(self.working_model(state, key="personal", device=ctx.device), data, ctx.device)


# ------------------------------------------------------------------------------------------ FedNH
@register
class FedNH(PersonalizedModel, Algorithm):
    name = "fednh"
    shares = "the body and per-class prototypes"
    keeps_client_state = True
    Params = FedNHParams

    def new_model(self, seed: int | None = None, name: str | None = None, options: dict | None = None) -> FLModel:
        body = super().new_model(seed, name, options)
        head = PrototypeHead(body.feature_dim, self.num_classes, self.params.scale, self.params.learn_scale)
        return NormalizedBodyModel(body, head)

    # ------------------------------------------------------------------ server half
    def init_global(self):
        model = self.new_model()
        generator = seeded_generator(self.setup.seed, PROTOTYPE_STREAM)
        with torch.no_grad():
            model.classifier.weight.copy_(
                initial_prototypes(self.params.init, self.num_classes, model.feature_dim, generator))
        return {"model": state_of(model)}

    def aggregate(self, state, updates: list[ClientUpdate], round_idx: int):
        if not updates:
            return state
        body = weighted_average([u.tensors for u in updates], [1.0] * len(updates))  # Alg. 1: plain mean
        sums = torch.stack([u.stats["proto_sums"] for u in updates]).double().sum(dim=0)
        counts = torch.stack([u.stats["counts"] for u in updates]).double().sum(dim=0)
        prototypes = smoothed_prototype_update(state["model"][PROTOTYPES], sums, counts, self.params.rho)
        return {**state, "model": {**body, PROTOTYPES: prototypes}}

    def round_metrics(self, state, updates, round_idx):
        return {"scale": float(state["model"][SCALE]),
                "prototype_min_distance": mean_nearest_neighbour_distance(state["model"][PROTOTYPES])}

    # ------------------------------------------------------------------ client half
    # local training is the base class's: CE over all classes; W is frozen, so only the body (and s) move (§3)
    def client_result(self, trained, train_loss, payload, data: ClientData, client_state, ctx: RoundContext):
        model = self.working_model(trained, device=ctx.device)
        dp = self.setup.stats_privacy
        sums, counts = class_feature_stats(model, data.x.to(ctx.device), data.y.to(ctx.device), self.num_classes,
                                           normalize=True, clip=dp.clip)
        sums, counts = released(sums, counts, dp, ctx, data.client_id)
        unit_means = F.normalize(sums, dim=1)  # the code renormalises each class mean before weighting by n_kc
        body = {k: v for k, v in trained.items() if k != PROTOTYPES}
        stats = {"proto_sums": (counts.unsqueeze(1) * unit_means).float(), "counts": counts.float()}
        update = ClientUpdate(data.client_id, data.num_samples, tensors=body, stats=stats,
                              metrics={"train_loss": train_loss})
        return update, {"model": trained}


# ------------------------------------------------------------- baselines under the same §5 protocol
@register
class FedAvgPM(PersonalizedModel, FedAvg):
    """FedAvg whose personalized model is a local update of the global model (docs/methods/fednh.md §5.1, §12.1)."""

    name = "fedavg_pm"
    shares = "the model (evaluated as a personalized one)"
    protocol_variant = True
    keeps_client_state = True
    Params = PersonalEvalParams

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        update, _ = super().client_result(trained, train_loss, payload, data, client_state, ctx)
        return update, {"model": trained}


@register
class LocalPM(LatestLocalModelEvaluation, Local):
    """Local, reporting PM(L) and PM(V) as well (docs/methods/fednh.md §9)."""

    name = "local_pm"
    shares = "nothing"
    protocol_variant = True
