"""CReFF (Shang, Lu, Huang and Wang, IJCAI 2022): FedAvg, plus a classifier re-trained on the server from federated
features synthesised to match the clients' per-class classifier gradients (docs/methods/creff.md).

- Client: FedAvg's local training from the FedAvg model (so the vectorized engine trains it). Before training it
  computes, for each class c it holds, the gradient of the classifier's cross-entropy on real features of class c,
  under the received body and re-trained classifier W_r, averaged over `grad_draws` draws of `batch_real` samples
  (FedNH's code: 10 draws of 64); it sends its model and those gradients.
- Server: the FedAvg average of the models; the per-class gradients averaged over the clients holding the class;
  then the federated features F (C × `num_features` rows of dimension d, N(0, 1) at start, kept across rounds) take
  `match_steps` SGD steps (`lr_feature`) on Σ_c D(∇_W CE(W_r F_c, c), ḡ_c), D the layer-wise cosine distance of the
  code ("ours"); finally a fresh classifier is trained on (F, labels) for `retrain_epochs` passes of SGD (`lr_net`,
  batches of train.batch_size) and becomes W_r.
- GM = the FedAvg body under W_r. Personalized model: FedAvg's (one local update of the FedAvg model, or the latest
  local model): the re-trained classifier is the server's only (docs/methods/fednh.md §5.1, Table 1 note).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from tasks.algorithms import optimizers
from tasks.algorithms.base import (
    Algorithm,
    ClientUpdate,
    derive_seed,
    evaluating,
    searchable,
    seeded_generator,
    torch_seeded,
    weighted_average,
)
from tasks.algorithms.personal import HEAD, PersonalEvalParams, PersonalizedModel, head_of
from tasks.algorithms.registry import register

FEATURE_STREAM, RETRAIN_STREAM, REAL_STREAM = 0xCF1, 0xCF2, 0xCF3


class CReFFParams(PersonalEvalParams):
    num_features: int = searchable(100, 10, 200, integer=True, ge=1,
                                   description="federated features per class (paper and FedNH's code: 100)")
    match_steps: int = Field(100, ge=0, description="SGD steps synthesising the features each round (100)")
    retrain_epochs: int = Field(300, ge=0, description="passes re-training the classifier on them (300)")
    lr_feature: float = searchable(0.01, 1e-3, 0.1, log=True, gt=0,
                                   description="learning rate of the features (FedNH's scripts 0.01, its yaml 0.1)")
    lr_net: float = searchable(0.01, 1e-3, 0.1, log=True, gt=0, description="learning rate of the re-training (0.01)")
    batch_real: int = Field(64, ge=1, description="real samples of a class per gradient draw (64)")
    grad_draws: int = Field(10, ge=1, description="draws averaged into a client's gradient of a class (10)")


# ------------------------------------------------------------------------------------ gradient matching
def head_forward(head: dict[str, torch.Tensor], h: torch.Tensor) -> torch.Tensor:
    return F.linear(h, head[HEAD + "weight"], head.get(HEAD + "bias"))


def head_gradient(head: dict[str, torch.Tensor], h: torch.Tensor, label: int, create_graph: bool = False) -> list:
    """∇ of CE(head(h), label), mean over the rows of h, w.r.t. the head's tensors in key order."""
    labels = torch.full((len(h),), label, dtype=torch.long, device=h.device)
    loss = F.cross_entropy(head_forward(head, h), labels)
    return list(torch.autograd.grad(loss, list(head.values()), create_graph=create_graph))


def match_distance(synthetic: list[torch.Tensor], real: list[torch.Tensor]) -> torch.Tensor:
    """The code's "ours" distance: Σ over tensors of Σ over rows (a bias is one row) of 1 − cos(real, synthetic)."""
    total = synthetic[0].new_zeros(())
    for gs, gr in zip(synthetic, real):
        gs, gr = gs.reshape(1, -1) if gs.dim() == 1 else gs, gr.reshape(1, -1) if gr.dim() == 1 else gr
        cos = (gs * gr).sum(dim=-1) / (gs.norm(dim=-1) * gr.norm(dim=-1) + 1e-6)
        total = total + (1 - cos).sum()
    return total


def synthesise_features(features: torch.Tensor, head: dict[str, torch.Tensor], real: dict[int, list],
                        per_class: int, steps: int, lr: float) -> torch.Tensor:
    """`steps` SGD steps on the features of every class in `real` (its averaged client gradient), toward the
    gradient that class's real features give the head; the others unchanged."""
    features = features.detach().clone().requires_grad_(True)
    head = {k: v.detach().requires_grad_(True) for k, v in head.items()}
    optimizer = optimizers.SGD([features], lr=lr)
    for _ in range(steps if real else 0):
        loss = features.new_zeros(())
        for c, g_real in real.items():
            rows = features[c * per_class:(c + 1) * per_class]
            loss = loss + match_distance(head_gradient(head, rows, c, create_graph=True), g_real)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return features.detach()


def retrain_classifier(features: torch.Tensor, per_class: int, head_like: dict[str, torch.Tensor], epochs: int,
                       lr: float, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A freshly initialised linear classifier (nn.Linear's init, drawn from `generator`), trained with SGD on
    (features, their classes) in shuffled batches: CReFF's classifier re-training."""
    num_classes, dim = head_like[HEAD + "weight"].shape
    with torch_seeded(int(torch.randint(2**62, (1,), generator=generator))):
        layer = nn.Linear(dim, num_classes, bias=HEAD + "bias" in head_like)
    labels = torch.arange(num_classes).repeat_interleave(per_class)
    optimizer = optimizers.SGD(layer.parameters(), lr=lr)
    for _ in range(epochs):
        for idx in torch.randperm(len(labels), generator=generator).split(batch_size):
            loss = F.cross_entropy(layer(features[idx]), labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return {HEAD + k: v.detach().clone() for k, v in layer.state_dict().items()}


# ------------------------------------------------------------------------------------------- method
@register
class CReFF(PersonalizedModel, Algorithm):
    name = "creff"
    shares = "the model and per-class gradients of the classifier on real features"
    Params = CReFFParams
    keeps_client_state = True  # only its latest local model, under personal_model: latest

    def init_global(self):
        state = super().init_global()
        generator = seeded_generator(self.setup.seed, FEATURE_STREAM)
        features = torch.randn(self.num_classes * self.params.num_features, state_dim(state), generator=generator)
        return {**state, "head": head_of(state["model"]), "features": features}

    def payload(self, state, round_idx):
        return {"model": state["model"], "head": state["head"]}

    def global_model(self, state):
        return self.working_model({**state["model"], **state["head"]}, key="eval")

    def aggregate(self, state, updates, round_idx):
        if not updates:
            return state
        model = weighted_average([u.tensors for u in updates], [u.num_samples for u in updates])
        real = averaged_class_gradients(updates, list(state["head"]))
        p = self.params
        features = synthesise_features(state["features"], state["head"], real, p.num_features, p.match_steps,
                                       p.lr_feature)
        generator = seeded_generator(self.setup.seed, RETRAIN_STREAM, round_idx)
        head = retrain_classifier(features, p.num_features, state["head"], p.retrain_epochs, p.lr_net,
                                  self.setup.train.batch_size, generator)
        return {**state, "model": model, "head": head, "features": features}

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        grads, present = self.class_gradients(payload, data, ctx)
        update = ClientUpdate(data.client_id, data.num_samples, tensors=trained,
                              stats={"class_grads": grads, "present": present}, metrics={"train_loss": train_loss})
        return update, ({"model": trained} if self.params.personal_model == "latest" else client_state)

    def class_gradients(self, payload, data, ctx) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Per class held: the head's gradient on real features of the class (received body, W_r), averaged over
        grad_draws draws of batch_real samples; {head tensor: [C, ...]} (zero rows for absent classes), present [C]."""
        model = self.working_model({**payload["model"], **payload["head"]}, key="real", device=ctx.device)
        head = {k: v.to(ctx.device).requires_grad_(True) for k, v in payload["head"].items()}
        generator = seeded_generator(derive_seed(ctx.seed, REAL_STREAM, ctx.round, data.client_id))
        counts = data.class_counts()
        grads = {k: torch.zeros(self.num_classes, *v.shape) for k, v in head.items()}
        with evaluating(model):
            for c in counts.nonzero().flatten().tolist():
                members = (data.y == c).nonzero().flatten()
                draws = []
                for _ in range(self.params.grad_draws):
                    pick = members[torch.randperm(len(members), generator=generator)[:self.params.batch_real]]
                    with torch.no_grad():
                        h = model.features(data.x[pick].to(ctx.device))
                    draws.append(head_gradient(head, h, c))
                for i, k in enumerate(head):
                    grads[k][c] = torch.stack([d[i] for d in draws]).mean(dim=0).cpu()
        return grads, counts > 0

    def latest_personal_state(self, payload, client_state):
        return client_state.get("model", payload["model"])


def state_dim(state) -> int:
    return state["model"][HEAD + "weight"].shape[1]


def averaged_class_gradients(updates: list[ClientUpdate], keys: list[str]) -> dict[int, list[torch.Tensor]]:
    """{class: [mean gradient per head tensor]} over the clients that hold the class (the code's uniform mean)."""
    present = torch.stack([u.stats["present"] for u in updates])
    out = {}
    for c in present.any(dim=0).nonzero().flatten().tolist():
        holders = [u for u, has in zip(updates, present[:, c]) if has]
        out[c] = [torch.stack([u.stats["class_grads"][k][c] for u in holders]).mean(dim=0) for k in keys]
    return out

