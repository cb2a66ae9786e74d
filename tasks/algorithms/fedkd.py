"""FedKD (Wu et al., Nature Communications 2022) as HtFLlib runs it (docs/methods/fedkd.md): a shared mentee
distilled from each client's private mentor, its updates compressed by SVD.

- Mentee: client 0's architecture (as FML's shared model, fml.py); every client keeps its own copy (buffers
  included) and a private W_h = Linear(D, D, no bias), and adopts the server's parameters when it is sent them.
- Client: trains mentor, mentee and W_h together, per batch, with s = CE + CE_g (not detached),
      L  = CE(z, y) + KL(softmax(z_g) ‖ softmax(z))/s + MSE(h, W_h h_g)/s,
      L_g = CE(z_g, y) + KL(softmax(z) ‖ softmax(z_g))/s + MSE(h, W_h h_g)/s,
  one backward pass of L + L_g (HtFLlib's two), each module's gradient clipped to `clip_norm`; mentor and W_h at
  the run's learning rate, the mentee at `mentee_lr`. It sends the mentee's parameters compressed at energy e_t.
- Compression (`compress`): a parameter of ≥ 2 dimensions and more than one row is replaced by its truncated SVD
  (over its last two dimensions, batched over the others: HtFLlib's conv kernels), keeping the fewest singular
  values whose squares exceed e_t of the total; e_t = energy_start + t/T·(energy_end − energy_start).
- Server: recovers every upload, takes the unweighted mean, and compresses it again at e_t for the next payload.
- Evaluation: each client's private mentor by its head.
Engines: sequential only (`not_vectorized`, fml.py): a step trains three modules.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from tasks.algorithms.base import (
    ClientData,
    ClientUpdate,
    RoundContext,
    State,
    derive_seed,
    searchable,
    state_of,
    torch_seeded,
)
from tasks.algorithms.fml import SharedModel, kl_mean, train_jointly
from tasks.algorithms.private_models import PrivateModelParams
from tasks.algorithms.registry import register

W_H_STREAM = 0xFD1
Factors = dict  # {"u": U_r, "s": σ_r, "v": V_rᵀ}


class FedKDParams(PrivateModelParams):
    mentee_lr: float = searchable(0.01, 0.001, 0.1, log=True, gt=0, description="the mentee's learning rate (-mlr 0.01)")
    energy_start: float = searchable(0.95, 0.8, 0.99, gt=0, lt=1, description="SVD energy kept in round 0 (-Ts 0.95)")
    energy_end: float = searchable(0.98, 0.8, 0.999, gt=0, le=1, description="SVD energy kept at the end (-Te 0.98)")
    clip_norm: float = Field(10.0, gt=0, description="each module's gradient-norm clip (hard-coded 10 in HtFLlib)")

    @model_validator(mode="after")
    def rising_energy(self):
        if self.energy_end < self.energy_start:
            raise ValueError(f"energy_end {self.energy_end} < energy_start {self.energy_start}: the energy kept rises")
        return self


# ------------------------------------------------------------------------------------------ compression
def svd_rank(singular: torch.Tensor, energy: float) -> int:
    """The fewest singular values (summed over any batch of matrices) whose squares exceed `energy` of the total;
    all of them where no shorter prefix does (HtFLlib keeps none then: docs/methods/fedkd.md, departures)."""
    squares = (singular.double() ** 2).reshape(-1, singular.shape[-1]).sum(dim=0)
    exceeds = torch.nonzero(torch.cumsum(squares, 0)[:-1] > energy * squares.sum()).flatten()
    return int(exceeds[0]) + 1 if len(exceeds) else singular.shape[-1]


def compress(tensors: State, energy: float) -> dict[str, torch.Tensor | Factors]:
    """Each parameter of ≥ 2 dimensions and > 1 row as its truncated SVD factors (others, and all-zero ones, as
    they are)."""
    out: dict[str, torch.Tensor | Factors] = {}
    for name, w in tensors.items():
        if w.dim() < 2 or w.shape[0] <= 1 or not bool(w.any()):
            out[name] = w
            continue
        u, s, vh = torch.linalg.svd(w, full_matrices=False)
        r = svd_rank(s, energy)
        out[name] = {"u": u[..., :r].contiguous(), "s": s[..., :r].contiguous(), "v": vh[..., :r, :].contiguous()}
    return out


def recover(compressed: dict[str, torch.Tensor | Factors]) -> State:
    """U·diag(σ)·Vᵀ for every factored parameter."""
    return {name: (c["u"] * c["s"].unsqueeze(-2)) @ c["v"] if isinstance(c, dict) else c
            for name, c in compressed.items()}


@register
class FedKD(SharedModel):
    name = "fedkd"
    shares = "a small shared mentee model"
    Params = FedKDParams

    def energy(self, round_idx: int) -> float:
        p = self.params
        return p.energy_start + round_idx / self.setup.train.rounds * (p.energy_end - p.energy_start)

    # ------------------------------------------------------------------ server half
    def init_global(self):
        return {"factors": {}}  # nothing is sent before the first aggregation: the clients hold the initial mentee

    def payload(self, state, round_idx):
        return {"factors": state["factors"]}

    def aggregate(self, state, updates: list[ClientUpdate], round_idx: int):
        if not updates:
            return state
        recovered = [recover(u.tensors) for u in updates]
        mean = {k: torch.stack([r[k].double() for r in recovered]).mean(dim=0).float() for k in recovered[0]}
        return {**state, "factors": compress(mean, self.energy(round_idx))}

    # ------------------------------------------------------------------ client half
    def init_client(self, data: ClientData):
        with torch_seeded(derive_seed(self.setup.seed, W_H_STREAM)):
            w_h = nn.Linear(self.feature_dim, self.feature_dim, bias=False).weight.detach()
        return {**super().init_client(data), "mentee": self.initial_shared(), "w_h": w_h}

    def distillation_loss(self, mentor: nn.Module, mentee: nn.Module, w_h: nn.Linear, x, y) -> torch.Tensor:
        """L + L_g (module docstring)."""
        h, h_g = mentor.features(x), mentee.features(x)
        z, z_g = mentor.classifier(h), mentee.classifier(h_g)
        ce, ce_g = F.cross_entropy(z, y), F.cross_entropy(z_g, y)
        scale = ce + ce_g
        hidden = F.mse_loss(h, w_h(h_g)) / scale
        return ce + kl_mean(z, z_g) / scale + hidden + ce_g + kl_mean(z_g, z) / scale + hidden

    def client_update(self, payload, data: ClientData, client_state, ctx: RoundContext):
        mentor = self.private_model(self.architecture(data.client_id), client_state["model"], ctx.device)
        mentee = self.shared_model({**client_state["mentee"], **recover(payload["factors"])}, ctx.device)
        w_h = nn.Linear(self.feature_dim, self.feature_dim, bias=False).to(ctx.device)
        with torch.no_grad():
            w_h.weight.copy_(client_state["w_h"])
        loss = train_jointly([mentor, mentee, w_h], [ctx.lr, self.params.mentee_lr, ctx.lr], data, ctx,
                             lambda x, y: self.distillation_loss(mentor, mentee, w_h, x, y), self.params.clip_norm)
        trained = state_of(mentee)
        update = ClientUpdate(data.client_id, data.num_samples,
                              tensors=compress(self.shared_parameters(trained), self.energy(ctx.round)),
                              metrics={"train_loss": loss})
        return update, {"model": state_of(mentor), "mentee": trained, "w_h": w_h.weight.detach().cpu().clone()}
