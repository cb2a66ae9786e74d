"""FedTGP (Zhang et al., AAAI 2024) as HtFLlib runs it (docs/methods/fedtgp.md): trainable global prototypes
refined on the server with an adaptive margin.

- Client: FedProto's loss, CE + λ·MSE(f, P̄^y) (fedproto.py); after training it computes its per-class
  prototypes on its training data in eval mode (`collect_protos`) and sends them with the per-class counts.
- Server (`update_TGP`): the margin is min(the largest of the classes' distances to their nearest other class,
  between the round's class-averaged prototypes; `margin_threshold`); a generator
  Embedding(C, D) → Linear(D, D)–ReLU → Linear(D, D), kept across rounds, is trained for `server_epochs` shuffled
  passes over every (prototype, class) pair of the round with SGD at the clients' learning rate, on
  CE(−(‖p − P̂^c‖ + margin·1[c = y]), y) over all C generated prototypes P̂; the global prototypes are then
  P̂^c for every class.
- Evaluation (the code): nearest global prototype ("proto", the headline), with the head rule beside it.
Engines: the client's loss is FedProto's and its prototypes are computed after training, so both engines train it.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from tasks.algorithms import optimizers
from tasks.algorithms.base import (
    ClientData,
    ClientUpdate,
    RoundContext,
    derive_seed,
    searchable,
    seeded_generator,
    torch_seeded,
)
from tasks.algorithms.fedproto import FedProto, FedProtoParams, prototypes_after_training, rows_by_class
from tasks.algorithms.prototypes import euclidean_distances, mean_of_present
from tasks.algorithms.registry import register

TGP_STREAM, SHUFFLE_STREAM = 0x7C9, 0x7CA


class FedTGPParams(FedProtoParams):
    server_epochs: int = searchable(100, 10, 200, integer=True, ge=1,
                                    description="passes of the server's prototype training per round (-se 100)")
    margin_threshold: float = searchable(100.0, 1.0, 100.0, log=True, ge=0,
                                         description="upper bound of the adaptive margin (-mart 100)")


class TrainableGlobalPrototypes(nn.Module):
    """HtFLlib's `Trainable_Global_Prototypes`: one learned embedding per class through a two-layer MLP."""

    def __init__(self, num_classes: int, dim: int):
        super().__init__()
        self.embeddings = nn.Embedding(num_classes, dim)
        self.middle = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
        self.fc = nn.Linear(dim, dim)

    def forward(self, classes: torch.Tensor) -> torch.Tensor:
        return self.fc(self.middle(self.embeddings(classes)))


def adaptive_margin(class_means: torch.Tensor, present: torch.Tensor, threshold: float) -> float:
    """min(max_c min_{c' ≠ c} ‖P̄^c − P̄^c'‖ over the classes present, threshold); the threshold when fewer than two
    classes are present (every gap is HtFLlib's 1e9 then)."""
    means = class_means[present].double()
    if len(means) < 2:
        return float(threshold)
    dist = torch.cdist(means, means)
    dist.fill_diagonal_(float("inf"))
    return min(float(dist.min(dim=1).values.max()), float(threshold))


def margin_loss(generated: torch.Tensor, protos: torch.Tensor, labels: torch.Tensor, margin: float) -> torch.Tensor:
    """CE(−(‖p − P̂^c‖ + margin·1[c = y]), y) over the batch (the distance's square root clamped away from 0)."""
    dist = euclidean_distances(protos, generated)
    return F.cross_entropy(-(dist + margin * F.one_hot(labels, len(generated))), labels)


def train_prototypes(tgp: TrainableGlobalPrototypes, protos: torch.Tensor, labels: torch.Tensor, margin: float,
                     lr: float, epochs: int, batch_size: int, generator: torch.Generator) -> None:
    """`epochs` shuffled passes of plain SGD on `margin_loss` (HtFLlib's `update_TGP`), in place."""
    optimizer = optimizers.SGD(tgp.parameters(), lr=lr)
    classes = torch.arange(tgp.embeddings.num_embeddings)
    tgp.train()
    for _ in range(epochs):
        order = torch.randperm(len(labels), generator=generator)
        for start in range(0, len(labels), batch_size):
            idx = order[start:start + batch_size]
            loss = margin_loss(tgp(classes), protos[idx], labels[idx], margin)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


@register
class FedTGP(FedProto):
    name = "fedtgp"
    shares = "per-class prototypes"
    Params = FedTGPParams

    # ------------------------------------------------------------------ server half
    def new_generator(self, state=None) -> TrainableGlobalPrototypes:
        with torch_seeded(derive_seed(self.setup.seed, TGP_STREAM)):
            tgp = TrainableGlobalPrototypes(self.num_classes, self.feature_dim)
        if state is not None:
            tgp.load_state_dict(state)
        return tgp

    def init_global(self):
        return {**super().init_global(), "tgp": self.new_generator().state_dict(), "margin": torch.tensor(0.0)}

    def aggregate(self, state, updates: list[ClientUpdate], round_idx: int):
        if not updates:
            return state
        rows, masks = zip(*(rows_by_class(u.stats, self.num_classes) for u in updates))
        means, present = mean_of_present(list(rows), list(masks))
        margin = adaptive_margin(means, present, self.params.margin_threshold)
        protos = torch.cat([u.stats["protos"] for u in updates])
        labels = torch.cat([torch.nonzero(u.stats["counts"] > 0).flatten() for u in updates])
        tgp = self.new_generator(state["tgp"])
        train_prototypes(tgp, protos, labels, margin, self.setup.train.lr, self.params.server_epochs,
                         self.setup.train.batch_size, seeded_generator(self.setup.seed, round_idx, SHUFFLE_STREAM))
        with torch.no_grad():
            generated = tgp.eval()(torch.arange(self.num_classes))
        return {**state, "protos": generated, "proto_mask": torch.ones(self.num_classes, dtype=torch.bool),
                "tgp": {k: v.detach().clone() for k, v in tgp.state_dict().items()},
                "margin": torch.tensor(margin)}

    def round_metrics(self, state, updates, round_idx):
        return {**super().round_metrics(state, updates, round_idx), "tgp_margin": float(state["margin"])}

    # ------------------------------------------------------------------ client half
    def local_objective(self, payload, data: ClientData, client_state, ctx: RoundContext):
        return dataclasses.replace(super().local_objective(payload, data, client_state, ctx), record_seen=False)

    def client_result(self, trained, train_loss, payload, data: ClientData, client_state, ctx: RoundContext):
        model = self.private_model(self.architecture(data.client_id), trained, ctx.device)
        stats = prototypes_after_training(model, data, ctx, self.setup.stats_privacy)
        update = ClientUpdate(data.client_id, data.num_samples, stats=stats, metrics={"train_loss": train_loss})
        return update, {**client_state, "model": trained}
