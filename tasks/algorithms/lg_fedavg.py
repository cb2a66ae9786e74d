"""LG-FedAvg (Liang et al. 2020) as HtFLlib runs it for heterogeneous models (docs/methods/lg_fedavg.md):
local representations, a global head.

- Clients keep private extractors of any family architecture (private_models.py); only the head (a Linear D→C,
  the same shape for every architecture) is shared.
- Server: the head starts as client 0's initial head; each round it is the sample-weighted mean of the heads
  the round's clients send back (HtFLlib's `uploaded_weights` = n_k / Σ n).
- Client: adopts the global head (HtFLlib's `set_parameters`, sent to every client before evaluation and
  training), trains the whole model by cross-entropy, and sends its head.
- Evaluation: each client's extractor with the global head, by the head (argmax), on its own test split.
Engines: the loss is plain cross-entropy from a per-client start, so both engines train it (one batch of clients
per architecture).
"""
from __future__ import annotations

from tasks.algorithms.base import (
    ClientData,
    ClientUpdate,
    LocalObjective,
    RoundContext,
    State,
    weighted_average,
)
from tasks.algorithms.private_models import PrivateModels, head_of
from tasks.algorithms.registry import register


class SharedHead(PrivateModels):
    """Private extractors under one head the server holds (LG-FedAvg, FedGen, FedGH): the head starts as client
    0's, every client adopts the latest before it trains or is evaluated."""

    def init_global(self) -> State:
        return {"head": head_of(self.initial_model(0))}

    def payload(self, state, round_idx):
        return {"head": state["head"]}

    def evaluated_state(self, payload, client_state) -> State:
        return {**client_state["model"], **payload["head"]}

    def local_objective(self, payload, data: ClientData, client_state, ctx: RoundContext) -> LocalObjective:
        return LocalObjective(start=self.evaluated_state(payload, client_state),
                              model_key=self.architecture(data.client_id))


@register
class LGFedAvg(SharedHead):
    name = "lg_fedavg"
    shares = "the head (the body stays on the client)"

    def aggregate(self, state, updates: list[ClientUpdate], round_idx: int):
        if not updates:
            return state
        return {**state, "head": weighted_average([u.tensors for u in updates], [u.num_samples for u in updates])}

    def client_result(self, trained, train_loss, payload, data: ClientData, client_state, ctx: RoundContext):
        update = ClientUpdate(data.client_id, data.num_samples, tensors=head_of(trained),
                              metrics={"train_loss": train_loss})
        return update, {**client_state, "model": trained}
