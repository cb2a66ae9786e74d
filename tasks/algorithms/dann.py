"""DANN (Ganin et al., "Domain-Adversarial Training of Neural Networks", JMLR 2016) with the clients as the
domains, as FedDebias's Table 10 runs it (docs/methods/dann.md): a discriminator D (a 3-layer MLP of width 256)
predicts the client id from the features h = φ(x), and the feature extractor is trained to fool it through a
gradient-reversal layer:

    loss = CE(ω(h), y) + γ·CE(D(R(h)), client id),     R(h) = h forward, −∂ backward

so one SGD step descends CE_d for D and ascends it for φ. Each client knows only its own id, so the
discriminator learns to tell the domains apart only once the server averages it with the others': D travels with
the model (its tensors prefixed "discriminator." in the update) and both are averaged as FedAvg averages the model.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from tasks.algorithms.base import (
    Algorithm,
    ClientUpdate,
    HyperParams,
    derive_seed,
    searchable,
    state_of,
    torch_seeded,
    train_batch_loss,
)
from tasks.algorithms.registry import register

DISCRIMINATOR_STREAM = 0xDA77
DISCRIMINATOR_PREFIX = "discriminator."


class DANNParams(HyperParams):
    weight: float = searchable(0.1, 0.01, 1.0, log=True, ge=0,
                               description="γ: weight of the domain loss (FedDebias tunes it in {0.01, 0.1, 1})")
    width: int = Field(256, ge=1, description="width of the domain discriminator's two hidden layers")


class GradientReversal(torch.autograd.Function):
    """Identity forward; the gradient negated backward."""

    @staticmethod
    def forward(ctx, h):
        return h.view_as(h)

    @staticmethod
    def backward(ctx, grad):
        return -grad


def discriminator(feature_dim: int, num_domains: int, width: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(feature_dim, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, num_domains))


def dann_loss(logits: torch.Tensor, y: torch.Tensor, domain_logits: torch.Tensor, domain: int,
              weight: float) -> torch.Tensor:
    """CE(ω(h), y) + γ·CE(D(R(h)), domain): the class loss and the domain loss on the reversed features."""
    domains = torch.full((len(y),), domain, dtype=torch.long, device=y.device)
    return F.cross_entropy(logits, y) + weight * F.cross_entropy(domain_logits, domains)


def split_update(tensors: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    model = {k: v for k, v in tensors.items() if not k.startswith(DISCRIMINATOR_PREFIX)}
    disc = {k[len(DISCRIMINATOR_PREFIX):]: v for k, v in tensors.items() if k.startswith(DISCRIMINATOR_PREFIX)}
    return model, disc


@register
class DANN(Algorithm):
    name = "dann"
    shares = "the model with its domain discriminator"
    Params = DANNParams
    keeps_client_state = False
    not_vectorized = ("it trains a discriminator beside the model, a second module whose parameters the "
                      "vectorised engine does not stack")

    def __init__(self, params, setup):
        super().__init__(params, setup)
        self._discriminator: nn.Module | None = None

    def new_discriminator(self) -> nn.Module:
        """D's initial weights, seeded apart from the model's (the model's init stays FedAvg's)."""
        with torch_seeded(derive_seed(self.setup.seed, DISCRIMINATOR_STREAM)):
            return discriminator(self.working_model().feature_dim, self.setup.num_clients, self.params.width)

    def working_discriminator(self, tensors: dict[str, torch.Tensor], device) -> nn.Module:
        if self._discriminator is None:
            self._discriminator = self.new_discriminator()
        self._discriminator.to(device).load_state_dict(tensors)
        return self._discriminator

    def init_global(self):
        return {**super().init_global(), "discriminator": state_of(self.new_discriminator())}

    def payload(self, state, round_idx):
        return {"model": state["model"], "discriminator": state["discriminator"]}

    def aggregate(self, state, updates, round_idx):
        """The models and the discriminators, each averaged with FedAvg's weights."""
        if not updates:
            return state
        merged = super().aggregate({"model": {}}, updates, round_idx)["model"]
        model, disc = split_update(merged)
        return {**state, "model": model, "discriminator": disc}

    def client_update(self, payload, data, client_state, ctx):
        model = self.working_model(payload["model"], device=ctx.device)
        disc = self.working_discriminator(payload["discriminator"], ctx.device)
        both = nn.ModuleList([model, disc])  # one optimizer, one gradient clip over the two

        def domain_adversarial_loss(x, y):
            h, logits = model(x, return_features=True)
            return dann_loss(logits, y, disc(GradientReversal.apply(h)), data.client_id, self.params.weight)

        loss = train_batch_loss(both, data, ctx, domain_adversarial_loss)
        tensors = {**state_of(model), **{DISCRIMINATOR_PREFIX + k: v for k, v in state_of(disc).items()}}
        update = ClientUpdate(data.client_id, data.num_samples, tensors=tensors,
                              metrics={"train_loss": loss})
        return update, client_state
