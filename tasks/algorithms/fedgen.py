"""FedGen (Zhu et al., ICML 2021) as HtFLlib runs it for heterogeneous models (docs/methods/fedgen.md): a
server-trained feature generator whose samples regularise the clients' heads.

- Set-up: every client sends its per-class sample counts once; their sum is the label distribution both the
  server and the clients draw generator labels from (HtFLlib's `qualified_labels`).
- Generator: [noise u ~ U(0, 1)^noise_dim, onehot(y)] → Linear–BatchNorm–ReLU (hidden_dim) → Linear → a
  feature of dimension D, used in train mode (batch statistics) by server and clients alike.
- Client: adopts the global head (as LG-FedAvg, lg_fedavg.py), then per batch CE(model(x), y) +
  CE(head(G(ŷ, u)), ŷ) with `train.batch_size` labels ŷ drawn from the label distribution and fresh noise, no
  gradient into G; it sends its head.
- Server: trains G for `server_steps` Adam steps (`generator_lr`) so that the sample-weighted ensemble of the
  heads it was sent, Σ_k (n_k/n)·head_k(G(ŷ, u)), classifies ŷ, and keeps it for the next round's clients
  (`keep_generator`, the paper's FedGen); then the head is their sample-weighted mean. HtFLlib's `servergen.py`
  trains a copy loaded from disk and never saves it, so its clients always draw from the initial generator:
  `keep_generator: false` runs that, skipping a training whose result nothing reads.
- Evaluation: each client's extractor with the global head, by the head (argmax).
Engines: sequential only (`not_vectorized`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from tasks.algorithms import optimizers
from tasks.algorithms.base import (
    ClientData,
    ClientUpdate,
    RoundContext,
    State,
    derive_seed,
    searchable,
    seeded_generator,
    state_of,
    torch_seeded,
    train_objective,
    weighted_average,
)
from tasks.algorithms.lg_fedavg import LGFedAvg
from tasks.algorithms.private_models import HEAD_PREFIX, PrivateModelParams
from tasks.algorithms.registry import register

GENERATOR_STREAM, SERVER_DRAWS_STREAM = 0x6E9, 0x6EA
WEIGHT, BIAS = f"{HEAD_PREFIX}weight", f"{HEAD_PREFIX}bias"


class FedGenParams(PrivateModelParams):
    noise_dim: int = Field(32, ge=1, description="dimension of the generator's uniform noise (-nd 32)")
    hidden_dim: int = Field(512, ge=1, description="width of the generator's hidden layer (-hd 512)")
    generator_lr: float = searchable(0.1, 0.001, 0.3, log=True, gt=0, description="the generator's Adam rate (-glr 0.1)")
    server_steps: int = searchable(100, 10, 200, integer=True, ge=1,
                                   description="Adam steps of the generator per round (-se 100)")
    keep_generator: bool = Field(True, description="keep the generator the server trains each round and send it to "
                                 "the clients (the paper's FedGen); false: HtFLlib's servergen.py, which never stores "
                                 "it, so the clients draw from the initial generator every round")


class FeatureGenerator(nn.Module):
    """HtFLlib's FedGen `Generator`, its noise passed in (drawn from a seeded generator)."""

    def __init__(self, noise_dim: int, num_classes: int, hidden_dim: int, feature_dim: int):
        super().__init__()
        self.num_classes = num_classes
        self.fc1 = nn.Sequential(nn.Linear(noise_dim + num_classes, hidden_dim), nn.BatchNorm1d(hidden_dim),
                                 nn.ReLU())
        self.fc = nn.Linear(hidden_dim, feature_dim)

    def forward(self, labels: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.fc(self.fc1(torch.cat([noise, F.one_hot(labels, self.num_classes).to(noise.dtype)], dim=1)))


def ensemble_logits(updates: list[ClientUpdate], z: torch.Tensor) -> torch.Tensor:
    """Σ_k (n_k/n)·head_k(z) over the heads the clients sent (HtFLlib's `uploaded_weights`)."""
    total = float(sum(u.num_samples for u in updates))
    return sum(F.linear(z, u.tensors[WEIGHT], u.tensors.get(BIAS)) * (u.num_samples / total) for u in updates)


@register
class FedGen(LGFedAvg):
    name = "fedgen"
    shares = "the head and label counts (the server trains a generator)"
    Params = FedGenParams
    not_vectorized = "each step draws generated features (labels and noise), which a per-round loss input cannot hold"

    def new_generator(self, state: State | None = None) -> FeatureGenerator:
        p = self.params
        with torch_seeded(derive_seed(self.setup.seed, GENERATOR_STREAM)):
            generator = FeatureGenerator(p.noise_dim, self.num_classes, p.hidden_dim, self.feature_dim)
        if state is not None:
            generator.load_state_dict(state)
        return generator.train()  # HtFLlib's clients use the generator as the server saved it: in train mode

    def draw(self, label_counts: torch.Tensor, rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of generator labels (from the clients' label distribution) and noise."""
        size = self.setup.train.batch_size
        labels = torch.multinomial(label_counts, size, replacement=True, generator=rng)
        return labels, torch.rand(size, self.params.noise_dim, generator=rng)

    # ------------------------------------------------------------------ set-up exchange
    def client_setup(self, data: ClientData, generator: torch.Generator) -> State:
        return {"counts": data.class_counts().float()}

    def server_setup(self, state: State, contributions: list[State]) -> State:
        return {**state, "label_counts": torch.stack([c["counts"] for c in contributions]).sum(dim=0)}

    # ------------------------------------------------------------------ server half
    def init_global(self):
        return {**super().init_global(), "generator": state_of(self.new_generator()),
                "label_counts": torch.ones(self.num_classes)}

    def payload(self, state, round_idx):
        return {**super().payload(state, round_idx), "generator": state["generator"],
                "label_counts": state["label_counts"]}

    def train_generator(self, state: State, updates: list[ClientUpdate], round_idx: int) -> State:
        """`server_steps` Adam steps on CE(Σ_k (n_k/n)·head_k(G(ŷ, u)), ŷ) (HtFLlib's `train_generator`)."""
        generator = self.new_generator(state["generator"])
        optimizer = optimizers.Adam(generator.parameters(), lr=self.params.generator_lr)
        rng = seeded_generator(self.setup.seed, round_idx, SERVER_DRAWS_STREAM)
        for _ in range(self.params.server_steps):
            labels, noise = self.draw(state["label_counts"], rng)
            z = generator(labels, noise)
            loss = F.cross_entropy(ensemble_logits(updates, z), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return state_of(generator)

    def aggregate(self, state, updates: list[ClientUpdate], round_idx: int):
        if not updates:
            return state
        head = weighted_average([u.tensors for u in updates], [u.num_samples for u in updates])
        if not self.params.keep_generator:  # HtFLlib trains a copy and drops it: the same state, without the work
            return {**state, "head": head}
        return {**state, "generator": self.train_generator(state, updates, round_idx), "head": head}

    # ------------------------------------------------------------------ client half
    def client_update(self, payload, data: ClientData, client_state, ctx: RoundContext):
        objective = self.local_objective(payload, data, client_state, ctx)
        model = self.working_model(objective.start, key=objective.model_key, device=ctx.device)
        generator = self.new_generator(payload["generator"]).to(ctx.device)
        counts = payload["label_counts"]

        def loss_with_generated(params, x, y, h, logits, inputs):
            labels, noise = self.draw(counts, ctx.generator)
            with torch.no_grad():  # HtFLlib steps the model's optimizer only
                z = generator(labels.to(ctx.device), noise.to(ctx.device))
            return F.cross_entropy(logits, y) + F.cross_entropy(model.classifier(z), labels.to(ctx.device))

        loss = train_objective(model, data, ctx, loss_with_generated, {})
        return self.client_result(state_of(model), loss, payload, data, client_state, ctx)
