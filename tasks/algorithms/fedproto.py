"""FedProto (Tan et al., AAAI 2022) as the FedSA code runs it (HtFLlib; docs/methods/fedsa.md §1, §4, §10).

- Private, heterogeneous models (§1, private_models.py): client i trains architecture `family_member(family, i)`
  with its own head. Model weights never leave a client.
- Local loss (Eq. 4, the code): CE + λ·MSE(f, P̄^y), the MSE averaged over batch and D; a sample whose class has
  no global prototype adds nothing (the code copies its own feature as the target).
- Upload (§4.2 step 4, §10.9): the per-class means of the detached features seen during this round's training
  (train mode), only for the classes the client holds, plus the per-class feature counts: nothing else.
- Server (§4.1 d): per class, the unweighted mean over this round's clients that hold it; it replaces the global
  prototypes, so a class that no participant holds has none until it reappears (the code).
- Evaluation (§4.3, §10.10, §10.14): every client's private model on its own test split, sample-weighted, by
  "head" (argmax of its head), "proto" (nearest global prototype, the code's rule) and, in FedSA, "anchor".
  The HEADLINE "acc" is "proto", the rule the code reports; before the first aggregation it scores 0.
- PM(L) and PM(V) (FedNH's Table 1, docs/methods/fednh.md §5.2): where the clients see a global test set, the same
  private model by the headline rule on it, weighted per class by the client's training label frequencies / by the
  presence of the class, as FedNH's FedProto.py scores `labeldist` and `validclass` by the nearest global
  prototype (`pm_l`, `pm_v`).

Engines: the loss is a `local_loss`, and the features met in training are recorded by whichever engine trains
(`LocalObjective.record_seen`), so FedProto trains on the vectorized engine too, one batch of clients per
architecture (`model_key`); a family member with BatchNorm or dropout keeps it on the sequential one.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from tasks.algorithms.base import (
    ClientData,
    ClientUpdate,
    LocalObjective,
    RoundContext,
    State,
    batch_mean,
    class_feature_stats,
    cross_entropy,
    searchable,
)
from tasks.algorithms.personal import pm_accuracies
from tasks.algorithms.private_models import PrivateModelParams, PrivateModels, eval_outputs
from tasks.algorithms.prototypes import (
    mean_nearest_neighbour_distance,
    mean_of_present,
    nearest_prototype,
)
from tasks.algorithms.registry import register
from tasks.models import FLModel
from tasks.privacy.class_stats import released
from tasks.privacy.settings import StatsDP


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


def rows_by_class(stats: dict, num_classes: int, key: str = "protos") -> tuple[torch.Tensor, torch.Tensor]:
    """An upload's per-class rows (`key`: prototypes, FedDistill's logits) spread to C rows (zeros where absent)
    and the mask of the classes it holds."""
    held = stats["counts"] > 0
    rows = torch.zeros(num_classes, stats[key].shape[1], dtype=stats[key].dtype)
    rows[held] = stats[key]
    return rows, held


def released_class_means(sums: torch.Tensor, counts: torch.Tensor, dp: StatsDP, ctx: RoundContext,
                         client_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the means of the classes held, the per-class counts) as they leave the client: under privacy.stats the
    noised sums over the noised counts, for the classes whose noised count rounds to ≥ 1 (float32)."""
    sums, counts = released(sums, counts, dp, ctx, client_id)
    held = counts > 0
    means = sums / counts.clamp_min(1.0).unsqueeze(1)
    return means[held].float(), counts.float()


def prototypes_after_training(model: FLModel, data: ClientData, ctx: RoundContext, dp: StatsDP) -> State:
    """The upload {"protos", "counts"} from the trained model's features of the client's training data in eval
    mode (HtFLlib's `collect_protos`: FedTGP, FedGH), released under privacy.stats."""
    sums, counts = class_feature_stats(model, data.x, data.y, data.num_classes, clip=dp.clip)
    protos, counts = released_class_means(sums, counts, dp, ctx, data.client_id)
    return {"protos": protos, "counts": counts}


@register
class FedProto(PrivateModels):
    name = "fedproto"
    shares = "per-class prototypes"
    Params = FedProtoParams
    headline = "proto"  # the code's rule

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
        protos, counts = released_class_means(seen.sums, seen.counts, self.setup.stats_privacy, ctx, data.client_id)
        stats = {"protos": protos, "counts": counts}
        update = ClientUpdate(data.client_id, data.num_samples, stats=stats, metrics={"train_loss": train_loss})
        return update, {**client_state, "model": trained}

    # ------------------------------------------------------------------ personalized evaluation
    def prediction_rules(self, payload) -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
        """rule -> (features, logits) -> predicted labels."""
        protos, mask = payload["protos"], payload["proto_mask"]
        return {**super().prediction_rules(payload), "proto": lambda h, logits: nearest_prototype(h, protos, mask)}

    def client_evaluate(self, payload, data: ClientData, client_state, ctx: RoundContext):
        """The private model on its own test split by every rule; on the global test set, where there is one,
        PM(L) and PM(V) by the headline rule (FedNH's FedProto.py)."""
        out = super().client_evaluate(payload, data, client_state, ctx)
        if data.global_y_test is None or not len(data.global_y_test):
            return out
        model = self.private_model(self.architecture(data.client_id), self.evaluated_state(payload, client_state),
                                   ctx.device)
        h, logits = eval_outputs(model, data.global_x_test.to(ctx.device))
        y = data.global_y_test.cpu()
        correct = self.prediction_rules(payload)[self.headline](h, logits).cpu() == y
        return {**out, **pm_accuracies(correct, y, data)}
