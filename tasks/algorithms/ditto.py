"""Ditto (Li, Hu, Beirami and Smith, ICML 2021): the global model is FedAvg's; each client also trains a personal
model v_k regularised toward the round's global model w^t (docs/methods/ditto.md).

Per round (Algorithm 1), from the received w^t: the client trains its copy of the global model with cross-entropy
for `train.local_epochs` passes and sends it up (FedAvg's server step); then its personal model, from where its last
round left it (θ⁰ at first), for `personal_epochs` passes on

    CE(v_k) + (λ/2)·‖v_k − w^t‖²,

w^t held fixed, by plain SGD at the round's rate (`personal_optimizer: plain_sgd`, FedNH's DittoOptimizer) or the
run's optimizer (`run`). Both models of a client are one parameter set on the engines (`PairedModel`: the global
copy under `global_model.`, the personal one under `personal.`), trained in two phases, so the vectorized engine
trains them too.
GM = the averaged global model; personalized model = v_k after one more round's update (docs/methods/fednh.md §12.1),
or v_k as its last participation left it (`personal_model: latest`).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field
from torch import nn
from torch.func import functional_call

from tasks.algorithms.base import (
    Algorithm,
    ClientUpdate,
    LocalObjective,
    Phase,
    cross_entropy,
    on_device,
    searchable,
    state_of,
)
from tasks.algorithms.fedprox import proximal_term
from tasks.algorithms.personal import PersonalEvalParams, PersonalizedModel
from tasks.algorithms.registry import register
from tasks.models import FLModel

GLOBAL, PERSONAL = "global_model.", "personal."
PAIR = "pair"


class DittoParams(PersonalEvalParams):
    lam: float = searchable(0.75, 0.01, 2.0, log=True, ge=0,
                            description="λ: pull of the personal model toward the global one (FedNH's code: 0.75)")
    personal_epochs: int | None = Field(None, ge=1, description="passes training the personal model (null: "
                                        "train.local_epochs, as FedNH's code)")
    personal_optimizer: Literal["plain_sgd", "run"] = Field(
        "plain_sgd", description="how the personal model trains: plain_sgd, plain SGD at the round's learning rate (no "
        "momentum, weight decay or clipping: FedNH's DittoOptimizer), or run, train.optimizer and train.grad_clip")


class PairedModel(FLModel):
    """A client's two models as one module: `global_model` (whose forward this is) and `personal`."""

    def __init__(self, global_model: FLModel, personal: FLModel):
        super().__init__()
        self.global_model, self.personal = global_model, personal
        self.feature_dim, self.num_classes = global_model.feature_dim, global_model.num_classes

    def forward(self, x, return_features: bool = False):
        return self.global_model(x, return_features)


def with_prefix(prefix: str, state) -> dict:
    return {prefix + k: v for k, v in state.items()}


def without_prefix(prefix: str, state) -> dict:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


@register
class Ditto(PersonalizedModel, Algorithm):
    name = "ditto"
    shares = "the global model (the personal model stays on the client)"
    Params = DittoParams
    keeps_client_state = True

    def working_model(self, state=None, key="global", device=None) -> FLModel:
        if key == PAIR and PAIR not in self._model_cache:
            self._model_cache[PAIR] = PairedModel(self.new_model(), self.new_model())
        return super().working_model(state, key, device)

    def init_client(self, data):
        return {"personal": state_of(self.new_model())}  # v_k⁰ = θ⁰

    def local_objective(self, payload, data, client_state, ctx):
        start = {**with_prefix(GLOBAL, payload["model"]), **with_prefix(PERSONAL, client_state["personal"])}
        phases = (Phase("global", trains=(GLOBAL,)),
                  Phase("personal", trains=(PERSONAL,), local_epochs=self.params.personal_epochs,
                        plain_sgd=self.params.personal_optimizer == "plain_sgd"))
        return LocalObjective(start=start, inputs={"anchor": on_device(payload["model"], ctx.device)},
                              model_key=PAIR, phases=phases)

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        """Phase "global": CE of the global copy; phase "personal": CE(v) + (λ/2)·‖v − w^t‖² (Ditto's Eq. 2)."""
        if inputs["phase"] == "global":
            return cross_entropy(logits, y, weight)
        personal = without_prefix(PERSONAL, params)
        model = self.working_model(key=PAIR).personal
        personal_logits = functional_call(model, personal, (x,))
        return cross_entropy(personal_logits, y, weight) + proximal_term(personal, inputs["anchor"], self.params.lam)

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        update = ClientUpdate(data.client_id, data.num_samples, tensors=without_prefix(GLOBAL, trained),
                              metrics={"train_loss": train_loss})
        return update, {"personal": without_prefix(PERSONAL, trained)}

    def latest_personal_state(self, payload, client_state):
        return with_prefix(PERSONAL, client_state["personal"])

    def personal_predictor(self, state, device) -> nn.Module:
        return self.working_model(without_prefix(PERSONAL, state), key="personal", device=device)
