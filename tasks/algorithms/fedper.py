"""FedPer (Arivazhagan et al., 2019): the body is FedAvg's, the head stays on each client (docs/methods/fedper.md).

- Client: trains body and its own head together with cross-entropy, from the broadcast body and the head its last
  round left (at first the initial model's head, the same θ⁰ for every client); sends the body only.
- Server: the sample-weighted mean of the bodies (FedAvg's); its head stays the initial one, so the global model
  (GM) is the global body under the initial head (docs/methods/fednh.md §5.1).
- Personalized model: the global body under the client's own head after one local update (§12.1), or the model its
  last participation left (`personal_model: latest`).
"""
from __future__ import annotations

from tasks.algorithms.base import Algorithm, ClientData, ClientUpdate, LocalObjective, weighted_average
from tasks.algorithms.personal import InitialHead, PersonalEvalParams, PersonalizedModel, body_of, head_of
from tasks.algorithms.registry import register


class PersonalHeadMethod(InitialHead, PersonalizedModel, Algorithm):
    """A shared body under a head each client keeps (FedPer, FedRep): the body goes down and up, the head stays."""

    keeps_client_state = True
    Params = PersonalEvalParams
    global_model_note = ("the shared body under the initial head, a head no client trained it with "
                         "(docs/methods/fednh.md §5.1)")

    def payload(self, state, round_idx):
        return {"model": body_of(state["model"])}

    def aggregate(self, state, updates, round_idx):
        if not updates:
            return state
        body = weighted_average([u.tensors for u in updates], [u.num_samples for u in updates])
        return {**state, "model": {**state["model"], **body}}

    def init_client(self, data: ClientData):
        return {"head": self.initial_head()}

    def local_objective(self, payload, data, client_state, ctx):
        return LocalObjective(start={**payload["model"], **client_state["head"]})

    def client_result(self, trained, train_loss, payload, data: ClientData, client_state, ctx):
        update = ClientUpdate(data.client_id, data.num_samples, tensors=body_of(trained),
                              metrics={"train_loss": train_loss})
        kept = {"head": head_of(trained)}
        if self.params.personal_model == "latest":  # the latest local model is evaluated: its body too
            kept["body"] = body_of(trained)
        return update, kept

    def latest_personal_state(self, payload, client_state):
        return {**client_state.get("body", payload["model"]), **client_state["head"]}


@register
class FedPer(PersonalHeadMethod):
    name = "fedper"
    shares = "the body (the head stays on the client)"
