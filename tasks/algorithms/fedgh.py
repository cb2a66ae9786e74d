"""FedGH (Yi et al., ACM MM 2023) as HtFLlib runs it (docs/methods/fedgh.md): a generalized global head trained
on the server on the clients' class prototypes.

- Clients keep private extractors of any family architecture (private_models.py) and adopt the server's head
  before they train or are evaluated (HtFLlib's `set_parameters`, sent to every client), as in LG-FedAvg.
- Client: trains the whole model by cross-entropy, then computes its per-class prototypes on its training data
  in eval mode (`collect_protos`: the mean extractor output of each class it holds) and sends them with the
  per-class counts; no weights leave it.
- Server (`train_head`): every (prototype, class) pair of the round is one training sample; the head is trained
  by cross-entropy with plain SGD (`server_lr`) for `server_epochs` shuffled passes in batches of
  `train.batch_size` (HtFLlib's `batch_size`), starting from the head it holds (client 0's initial head at first).
- Evaluation: each client's extractor with the global head, by the head (argmax).
Engines: the client's loss is plain cross-entropy and its prototypes are computed after training, so both engines
train it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tasks.algorithms import optimizers
from tasks.algorithms.base import (
    ClientData,
    ClientUpdate,
    RoundContext,
    State,
    searchable,
    seeded_generator,
)
from tasks.algorithms.fedproto import prototypes_after_training
from tasks.algorithms.lg_fedavg import SharedHead
from tasks.algorithms.private_models import HEAD_PREFIX, PrivateModelParams
from tasks.algorithms.registry import register

HEAD_STREAM = 0x6E4
WEIGHT, BIAS = f"{HEAD_PREFIX}weight", f"{HEAD_PREFIX}bias"


class FedGHParams(PrivateModelParams):
    server_lr: float = searchable(0.01, 0.001, 0.1, log=True, gt=0,
                                  description="the server's SGD learning rate for the head (HtFLlib -slr 0.01)")
    server_epochs: int = searchable(1, 1, 10, integer=True, ge=1,
                                    description="passes over the round's prototypes (HtFLlib -se 1)")


def uploaded_pairs(updates: list[ClientUpdate]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (prototype, class) pair the round's clients sent, client by client, class by class."""
    protos = torch.cat([u.stats["protos"] for u in updates])
    labels = torch.cat([torch.nonzero(u.stats["counts"] > 0).flatten() for u in updates])
    return protos, labels


def train_head(head: State, protos: torch.Tensor, labels: torch.Tensor, lr: float, epochs: int, batch_size: int,
               generator: torch.Generator) -> State:
    """The head after `epochs` shuffled passes of SGD on CE(head(p), y) over the pairs (HtFLlib's `train_head`)."""
    params = {k: v.detach().clone().requires_grad_(True) for k, v in head.items()}
    optimizer = optimizers.SGD(list(params.values()), lr=lr)
    for _ in range(epochs):
        order = torch.randperm(len(labels), generator=generator)
        for start in range(0, len(labels), batch_size):
            idx = order[start:start + batch_size]
            loss = F.cross_entropy(F.linear(protos[idx], params[WEIGHT], params.get(BIAS)), labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return {k: v.detach() for k, v in params.items()}


@register
class FedGH(SharedHead):
    name = "fedgh"
    shares = "per-class feature prototypes (the server trains a global head)"
    Params = FedGHParams

    def aggregate(self, state, updates: list[ClientUpdate], round_idx: int):
        if not updates:
            return state
        protos, labels = uploaded_pairs(updates)
        p = self.params
        head = train_head(state["head"], protos, labels, p.server_lr, p.server_epochs, self.setup.train.batch_size,
                          seeded_generator(self.setup.seed, round_idx, HEAD_STREAM))
        return {**state, "head": head}

    def client_result(self, trained, train_loss, payload, data: ClientData, client_state, ctx: RoundContext):
        model = self.private_model(self.architecture(data.client_id), trained, ctx.device)
        stats = prototypes_after_training(model, data, ctx, self.setup.stats_privacy)
        update = ClientUpdate(data.client_id, data.num_samples, stats=stats, metrics={"train_loss": train_loss})
        return update, {**client_state, "model": trained}
