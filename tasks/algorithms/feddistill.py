"""FedDistill (Jeong et al. 2018, federated distillation) as HtFLlib runs it (docs/methods/feddistill.md):
clients share per-class average logits.

- Client (private model of any family architecture, private_models.py): per batch
  CE(z, y) + λ·CE(z, softmax(t_y)), the second a cross-entropy against soft targets, t_y = the global logit vector of
  class y (FedSA's copy of the code, whose numbers the tables report; HtFLlib's own `clientfd.py` passes the raw
  logits as the target: `softmax_targets: false`), a sample whose class has no global logits targeting its own
  detached logits; the term is off until the server has logits.
  The logits met in training (train mode, before each step) are averaged per class and sent with the per-class
  counts: nothing else.
- Server: per class, the unweighted mean over this round's clients that hold it (FedProto's aggregation); it
  replaces the previous global logits.
- Evaluation: each client's private model by its head.
Engines: sequential only (`not_vectorized`): the upload is the logits met in training, and the vectorized engine
records features only.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field

from tasks.algorithms.base import (
    ClientData,
    ClientUpdate,
    RoundContext,
    searchable,
    state_of,
    train_objective,
)
from tasks.algorithms.fedproto import released_class_means, rows_by_class
from tasks.algorithms.private_models import PrivateModelParams, PrivateModels
from tasks.algorithms.prototypes import ClassMeans, mean_of_present
from tasks.algorithms.registry import register


class FedDistillParams(PrivateModelParams):
    lam: float = searchable(0.1, 0.01, 10.0, log=True, ge=0,
                            description="λ: weight of the distillation term (-lam 0.1 in the FedSA scripts, 1 in total.sh)")
    softmax_targets: bool = Field(True, description="targets softmax(global logits), as FedSA's copy of the code "
                                                    "(clientdistill.py); false: the raw logits HtFLlib's clientfd.py passes")


def distillation_loss(logits: torch.Tensor, y: torch.Tensor, global_logits: torch.Tensor, mask: torch.Tensor,
                      softmax_targets: bool = False) -> torch.Tensor:
    """CE(z, t_y) = −mean_b Σ_c t_{y_b,c} log softmax(z_b)_c with t_y the global logits of class y, or the sample's
    own detached logits where class y has none."""
    target = torch.where(mask[y].unsqueeze(1), global_logits[y], logits.detach())
    return F.cross_entropy(logits, target.softmax(dim=1) if softmax_targets else target)


@register
class FedDistill(PrivateModels):
    name = "feddistill"
    shares = "per-class mean logits"
    Params = FedDistillParams
    not_vectorized = ("its upload is the per-class mean of the logits met in training, and the vectorized engine "
                      "records features only")

    # ------------------------------------------------------------------ server half
    def init_global(self):
        return {"logits": torch.zeros(self.num_classes, self.num_classes),
                "logit_mask": torch.zeros(self.num_classes, dtype=torch.bool)}

    def payload(self, state, round_idx):
        return {"logits": state["logits"], "logit_mask": state["logit_mask"]}

    def aggregate(self, state, updates: list[ClientUpdate], round_idx: int):
        if not updates:
            return state
        rows, masks = zip(*(rows_by_class(u.stats, self.num_classes, key="logits") for u in updates))
        logits, mask = mean_of_present(list(rows), list(masks))
        return {**state, "logits": logits, "logit_mask": mask}

    # ------------------------------------------------------------------ client half
    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        loss = F.cross_entropy(logits, y)
        if not bool(inputs["logit_mask"].any()):  # HtFLlib: no global logits yet, no term
            return loss
        return loss + self.params.lam * distillation_loss(logits, y, inputs["logits"], inputs["logit_mask"],
                                                          self.params.softmax_targets)

    def client_update(self, payload, data: ClientData, client_state, ctx: RoundContext):
        model = self.private_model(self.architecture(data.client_id), client_state["model"], ctx.device)
        seen = ClassMeans(self.num_classes, self.num_classes, self.setup.stats_privacy.clip)

        def loss_recording_logits(params, x, y, h, logits, inputs):
            seen.add(logits, y)
            return self.local_loss(params, x, y, h, logits, inputs)

        inputs = {k: payload[k].to(ctx.device) for k in ("logits", "logit_mask")}
        loss = train_objective(model, data, ctx, loss_recording_logits, inputs)
        logits, counts = released_class_means(seen.sums, seen.counts, self.setup.stats_privacy, ctx, data.client_id)
        update = ClientUpdate(data.client_id, data.num_samples, stats={"logits": logits, "counts": counts},
                              metrics={"train_loss": loss})
        return update, {**client_state, "model": state_of(model)}
