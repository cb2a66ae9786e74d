"""FedBABU (Oh, Kim and Yun, ICLR 2022): the body is trained and averaged under a head that stays as initialised
(random, the same for every client, never updated) during federation; a client's personalized model is the global
model fine-tuned on its own data (docs/methods/fedbabu.md).

- Client: cross-entropy with the head held (a Phase that holds `classifier.`); sends the body only.
- Server: the sample-weighted mean of the bodies; the head is θ⁰'s throughout, so GM = global body + initial head.
- Personalized model: the global model fine-tuned, body and head, for `finetune_epochs` passes (the paper's
  fine-tuning of the whole model; FedNH's code: 5 epochs), trained for the evaluation and not kept; or the global
  model itself (`personal_model: latest`, FedBABU's clients keep nothing).
"""
from __future__ import annotations

from tasks.algorithms.base import Algorithm, ClientUpdate, LocalObjective, Phase, searchable, weighted_average
from tasks.algorithms.personal import HEAD, InitialHead, PersonalEvalParams, PersonalizedModel, body_of
from tasks.algorithms.registry import register


class FedBABUParams(PersonalEvalParams):
    finetune_epochs: int = searchable(5, 1, 10, integer=True, ge=1,
                                      description="τ_f: passes of the personalizing fine-tune (FedNH's code: 5)")


@register
class FedBABU(InitialHead, PersonalizedModel, Algorithm):
    name = "fedbabu"
    shares = "the body (the head stays as initialised)"
    Params = FedBABUParams
    keeps_client_state = False

    def payload(self, state, round_idx):
        return {"model": body_of(state["model"])}  # the head is θ⁰'s, built by every client from the run seed

    def aggregate(self, state, updates, round_idx):
        if not updates:
            return state
        body = weighted_average([u.tensors for u in updates], [u.num_samples for u in updates])
        return {**state, "model": {**state["model"], **body}}

    def local_objective(self, payload, data, client_state, ctx):
        return LocalObjective(start={**payload["model"], **self.initial_head()}, phases=(Phase("body", holds=(HEAD,)),))

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        update = ClientUpdate(data.client_id, data.num_samples, tensors=body_of(trained),
                              metrics={"train_loss": train_loss})
        return update, client_state

    def final_objective(self, payload, data, client_state, ctx):
        """The personalizing fine-tune: every parameter, `finetune_epochs` passes."""
        return LocalObjective(start={**payload["model"], **self.initial_head()},
                              phases=(Phase("finetune", local_epochs=self.params.finetune_epochs),))

    def latest_personal_state(self, payload, client_state):
        return {**payload["model"], **self.initial_head()}
