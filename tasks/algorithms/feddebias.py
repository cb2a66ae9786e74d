"""FedDebias / FedBR (docs/methods/feddebias.md §2–§5): local-learning-bias reduction with pseudo-data.

Every local iteration (Algorithm 1, §3.5) on a local batch (x, y) and the whole pseudo batch D_p:
  1. max step: one SGD ascent step on the projector θ only, for L_con on detached features (Eq. 2);
  2. min step: one SGD descent step on the extractor φ and the classifier ω for
         CE(ω(φ(x)), y) + λ·softCE(ω(φ(x_p)), ỹ_p) + μ·L_con                                     (Eq. 3)
     with the θ just updated held fixed (its gradients are discarded).

L_con (Eq. 5, corrected as in §3.1) has one positive, (P(φ(x_p)), P(φ_g(x_p))), and one negative,
(P(φ(x_p)), P(φ(x))), where x is the real local sample paired with x_p by batch index and φ_g is the
round-start global extractor, frozen. Temperatures multiply the cosine (§3.3, the code's convention);
`temperature: divide` gives the paper's sim/τ form.

Pseudo-data (§2.1, §10.1 step 6): RSM, built once before round 0 through the framework's one-off exchange.
Slot j of the B pseudo-samples belongs to a client drawn uniformly with the pseudo-data RNG (seed 1000 + s,
known to every party); that client uploads the mean of M = 10 of its (rotated) images, drawn with
replacement (code: M = 10). The label is uniform. The server sends D_p down once ("transfer once", the code's
default and Table 2): it is in the payload until every client has confirmed it, and clients keep it as
state. `pseudo_data: mixture` re-mixes every pseudo-sample with K local samples of the current batch at
every step (Eq. 4) and uses the Eq. (6) negative (paper; the code omits it). The digits benchmark has no
proxy dataset, so the shared RSM batch stands in for Algorithm 3's proxy RSM.

Server (§4): a plain 1/M average of φ, ω and θ (Alg. 1 lines 13–15; not sample-weighted). θ travels with
the model as "projector.*" tensors. P is never used for prediction.

Ablations (Table 3, §10.3): component 1 only = `use_contrastive: false` (no P); component 2 only =
`use_pseudo: false`; "w/o max step" = `max_step: false` (θ stays at its random init);
`projector: false` is the other reading (contrastive loss on raw features).
"FedDebias + Mixup" (Table 1; the code's `use_Mixup`) = `mixup: true`: the local batch is mixed within itself
(λ ∼ Beta(0.2, 0.2), the draws of the `mixup` method) and its CE is taken against the mixed label; the pseudo-data
terms see the mixed batch, as the code's do.

Engines: sequential only. Within every step the max step must finish between the model's forward pass and the
min-step loss, which reads the θ it has just produced: two parameter groups (θ, then φ and ω), each with its
own optimizer state (momentum, weight decay, clipping), stepped one after the other inside one iteration on
the same features. The vectorized engine steps one group once per iteration on a `local_loss` of the
parameters as they were at the iteration's start, so FedDebias would need an engine with a second, inner
vmapped gradient and stacked optimizer for θ (its features detached) before the min loss. Besides, the mixture
pseudo-data draws from the client's generator at every step, and a client whose D_p was lost trains a plain
supervised round, a different objective from the clients it would be stacked with.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from tasks.algorithms.base import (
    Algorithm,
    ClientData,
    ClientUpdate,
    HyperParams,
    RoundContext,
    State,
    derive_seed,
    local_batches,
    make_optimizer,
    searchable,
    seeded_generator,
    state_of,
    step,
    torch_seeded,
    train_supervised,
    weighted_average,
)
from tasks.algorithms.mixup import mixing_rng, mixup_loss
from tasks.algorithms.moon import two_logit_contrastive
from tasks.algorithms.optimizers import Optimizer
from tasks.algorithms.registry import register

PROJECTOR_STREAM = 0xDEB1A5
PROJECTOR_PREFIX = "projector."


class FedDebiasParams(HyperParams):
    lam: float = searchable(1.0, 0.1, 1.0, log=True, ge=0,
                            description="λ: weight of Component 1, CE on pseudo-data (Table 9: 0.1, 0.5, 1.0)")
    mu: float = searchable(0.5, 0.1, 2.0, log=True, ge=0,
                           description="μ: weight of L_con in the min step (not ablated; code 0.5)")
    tau1: float = searchable(2.0, 0.5, 4.0, ge=0, description="τ1: positive-pair temperature (multiplies the cosine)")
    tau2: float = searchable(2.0, 0.0, 2.0, ge=0,
                             description="τ2: negative-pair temperature (Tables 7, 8: 0, 0.1, 0.5, 1, 2)")
    gamma: float = Field(1.0, ge=0, description="scale of the max-step loss (code)")
    temperature: Literal["multiply", "divide"] = Field(
        "multiply", description="multiply: exp(τ·sim) (code, §3.3); divide: exp(sim/τ) (paper's notation)")
    use_pseudo: bool = Field(True, description="Component 1: λ·CE(pseudo-data, uniform label)")
    use_contrastive: bool = Field(True, description="Component 2: the min–max contrastive step")
    max_step: bool = Field(True, description="false: θ is never trained (Table 3, 'w/o max step')")
    projector: bool = Field(True, description="false: L_con on raw features, no P (§3.5's other reading)")
    pseudo_data: Literal["rsm", "mixture"] = "rsm"
    mixture_k: int = Field(1, ge=0, description="K of Eq. (4): local samples mixed into each pseudo-sample")
    mixture_correction: bool = Field(True, description="Eq. (6) negative for Mixture pseudo-data (paper)")
    num_pseudo: int | None = Field(None, ge=1, description="|D_p|; default train.batch_size (Alg. 1: |D_p| = B)")
    rsm_samples: int = Field(10, ge=1, description="M: local images averaged into one RSM sample (code: 10)")
    pseudo_seed_offset: int = Field(1000, description="the pseudo-data RNG is seeded with offset + run seed")
    mixup: bool = Field(False, description="the '+ Mixup' backbone (Table 1, the code's use_Mixup): the local CE on "
                        "a within-batch Mixup of the local batch, against the mixed label")
    mixup_alpha: float = Field(0.2, gt=0, description="α of the Mixup λ ∼ Beta(α, α) (code: 0.2)")

    @model_validator(mode="after")
    def divisible_temperatures(self) -> FedDebiasParams:
        if self.temperature == "divide" and min(self.tau1, self.tau2) <= 0:
            raise ValueError("temperature 'divide' needs tau1 > 0 and tau2 > 0")
        return self


# --------------------------------------------------------------------------------------- pseudo-data
def pseudo_owners(seed: int, num_clients: int, size: int) -> torch.Tensor:
    """The client each pseudo-sample is averaged from: uniform, from the pseudo-data seed alone."""
    return torch.randint(num_clients, (size,), generator=torch.Generator().manual_seed(seed))


def rsm_samples(x: torch.Tensor, count: int, per_sample: int, generator: torch.Generator) -> torch.Tensor:
    """`count` Random Sample Means (Alg. 2): each the mean of `per_sample` images drawn with replacement."""
    if not x.is_floating_point():
        raise ValueError("feddebias: its pseudo-data are means of input samples (docs/methods/feddebias.md §2.1), "
                         "and token ids (text) have no mean; it runs on images only")
    idx = torch.randint(len(x), (count, per_sample), generator=generator)
    return x[idx].mean(dim=1)


def uniform_labels(count: int, num_classes: int, device=None) -> torch.Tensor:
    return torch.full((count, num_classes), 1.0 / num_classes, device=device)


def mix_pseudo(x_p: torch.Tensor, y_p: torch.Tensor, x: torch.Tensor, y: torch.Tensor, k: int,
               generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (4): x̃_p = (x_p + Σ_k x_k)/(K+1), ỹ_p = (ỹ + Σ_k onehot(y_k))/(K+1), x_k drawn from the batch.
    y: class ids, or the batch's soft labels (a Mixup batch)."""
    idx = torch.randint(len(x), (len(x_p), k), generator=generator).to(x.device)
    target = y[idx].to(y_p.dtype) if y.is_floating_point() else F.one_hot(y[idx], y_p.shape[1]).to(y_p.dtype)
    return (x_p + x[idx].sum(dim=1)) / (k + 1), (y_p + target.sum(dim=1)) / (k + 1)


def mixed_batch(x: torch.Tensor, y: torch.Tensor, alpha: float, rng) -> tuple[torch.Tensor, torch.Tensor, float]:
    """A within-batch Mixup: (λ·x + (1 − λ)·x[π], y[π], λ), λ ∼ Beta(α, α) and π drawn from rng, in that order."""
    lam = float(rng.beta(alpha, alpha))
    order = torch.from_numpy(rng.permutation(len(x))).to(x.device)
    return lam * x + (1.0 - lam) * x[order], y[order], lam


def soft_labels(y: torch.Tensor, num_classes: int, mix: tuple[torch.Tensor, float] | None = None) -> torch.Tensor:
    """One-hot labels, or λ·onehot(y) + (1 − λ)·onehot(y[π]) for a Mixup batch (mix = (y[π], λ))."""
    onehot = F.one_hot(y, num_classes).float()
    if mix is None:
        return onehot
    return mix[1] * onehot + (1.0 - mix[1]) * F.one_hot(mix[0], num_classes).float()


# ------------------------------------------------------------------------------------------- losses
def soft_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """−mean_j Σ_c target_jc·log softmax(logits_j)_c (Component 1 with the uniform label, §2.2)."""
    return -(target * F.log_softmax(logits, dim=1)).sum(dim=1).mean()


def projection_head(dim: int) -> nn.Sequential:
    """P_θ: Linear(d, 2d)–ReLU–Linear(2d, 2d)–ReLU–Linear(2d, d) (code; §3.1)."""
    return nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, 2 * dim), nn.ReLU(),
                         nn.Linear(2 * dim, dim))


def paired(z_x: torch.Tensor, count: int) -> torch.Tensor:
    """The local sample paired with each of `count` pseudo-samples: by batch index (cycled if fewer)."""
    return z_x[torch.arange(count, device=z_x.device) % len(z_x)]


def debias_contrastive_loss(projector: nn.Module, z_p: torch.Tensor, z_g: torch.Tensor, z_x: torch.Tensor,
                            scale1: float, scale2: float, neg_weight: torch.Tensor | None = None) -> torch.Tensor:
    """L_con (Eq. 5 corrected): mean_j −log softmax([s1·sim(P z_p, P z_g), s2·sim(P z_p*, P z_x)])_0.

    z_x holds the local features already paired with z_p. scale = τ (multiplicative) or 1/τ. With
    neg_weight w_j = ⟨ỹ_p, y⟩ (Eq. 6) the negative's anchor is P(z_p − w·z_x), otherwise P(z_p)."""
    parts = [z_p, z_g, z_x] if neg_weight is None else [z_p, z_g, z_x, z_p - neg_weight[:, None] * z_x]
    e_p, e_g, e_x, *shifted = projector(torch.cat(parts)).split(len(z_p))  # one pass: P is per-sample
    neg_anchor = shifted[0] if shifted else e_p
    pos = F.cosine_similarity(e_p, e_g, dim=1)
    neg = F.cosine_similarity(neg_anchor, e_x, dim=1)
    return two_logit_contrastive(scale1 * pos, scale2 * neg)


def temperature_scales(p: FedDebiasParams) -> tuple[float, float]:
    if p.temperature == "divide":
        return 1.0 / p.tau1, 1.0 / p.tau2
    return p.tau1, p.tau2


def max_step(projector: nn.Module, optimizer: Optimizer, z_p: torch.Tensor, z_g: torch.Tensor,
             z_x: torch.Tensor, p: FedDebiasParams, ctx: RoundContext, neg_weight=None) -> None:
    """Alg. 1 line 8: one ascent step on θ for γ·L_con, the features detached (the optimizer holds θ only)."""
    con = debias_contrastive_loss(projector, z_p.detach(), z_g, z_x.detach(), *temperature_scales(p), neg_weight)
    step(optimizer, -p.gamma * con, projector, ctx)


def min_loss(model: nn.Module, projector: nn.Module | None, z_p: torch.Tensor | None, z_g: torch.Tensor | None,
             z_x: torch.Tensor, y: torch.Tensor, y_p: torch.Tensor | None, p: FedDebiasParams,
             neg_weight=None, mix: tuple[torch.Tensor, float] | None = None) -> torch.Tensor:
    """L_gen (Eq. 3): CE(local) + λ·softCE(pseudo, ỹ_p) + μ·L_con; gradients reach φ through z_p and z_x.
    mix = (y[π], λ): z_x is of a Mixup batch, its CE against the mixed label."""
    logits = model.classifier(z_x)
    loss = F.cross_entropy(logits, y) if mix is None else mixup_loss(logits, y, mix[0], mix[1])
    if p.use_pseudo:
        loss = loss + p.lam * soft_cross_entropy(model.classifier(z_p), y_p)
    if p.use_contrastive:
        z_pair = paired(z_x, len(z_p))
        loss = loss + p.mu * debias_contrastive_loss(projector, z_p, z_g, z_pair, *temperature_scales(p), neg_weight)
    return loss


# -------------------------------------------------------------------------------------- the algorithm
@register
class FedDebias(Algorithm):
    name = "feddebias"
    shares = "the model and pseudo-data"
    Params = FedDebiasParams
    not_vectorized = ("its max step (the projector θ, with its own optimizer) must update θ between the forward "
                      "pass and the min-step loss of every iteration: two parameter groups stepped in sequence")

    def __init__(self, params: FedDebiasParams, setup):
        super().__init__(params, setup)
        self._projector: nn.Module | None = None

    # ------------------------------------------------------------------ pieces
    @property
    def uses_pseudo_data(self) -> bool:
        return self.params.use_pseudo or self.params.use_contrastive

    @property
    def trains_projector(self) -> bool:
        return self.params.use_contrastive and self.params.projector

    @property
    def pseudo_seed(self) -> int:
        return self.params.pseudo_seed_offset + self.setup.seed

    @property
    def num_pseudo(self) -> int:
        return self.params.num_pseudo or self.setup.train.batch_size

    def new_projector(self) -> nn.Module:
        """θ_0: initialised once (seeded apart from the model, so the model's init matches FedAvg's)."""
        with torch_seeded(derive_seed(self.setup.seed, PROJECTOR_STREAM)):
            return projection_head(self.working_model().feature_dim)

    def working_projector(self, state: State | None, device=None) -> nn.Module:
        if not self.trains_projector:
            return nn.Identity()
        if self._projector is None:
            self._projector = self.new_projector()
        if device is not None:
            self._projector.to(device)
        if state is not None:
            self._projector.load_state_dict(state)
        return self._projector

    # ------------------------------------------------------------------ one-off pseudo-data exchange
    def client_setup(self, data: ClientData, generator: torch.Generator) -> State:
        """This client's RSM samples, for the slots the shared pseudo-data RNG gave it (§10.1 step 6)."""
        if not self.uses_pseudo_data or data.num_samples == 0:
            return {}
        owners = pseudo_owners(self.pseudo_seed, self.setup.num_clients, self.num_pseudo)
        slots = (owners == data.client_id).nonzero().flatten()
        rng = seeded_generator(self.pseudo_seed, data.client_id)
        return {"slots": slots, "x": rsm_samples(data.x, len(slots), self.params.rsm_samples, rng)}

    def server_setup(self, state: State, contributions: list[State]) -> State:
        contributions = [c for c in contributions if c]
        if not contributions:
            return state
        slots = torch.cat([c["slots"] for c in contributions])
        x = torch.cat([c["x"] for c in contributions])
        pending = torch.ones(self.setup.num_clients, dtype=torch.bool)
        return {**state, "pseudo_x": x[slots.argsort()], "pseudo_pending": pending}

    # ------------------------------------------------------------------ server half
    def init_global(self) -> State:
        state = super().init_global()
        if self.trains_projector:
            state["projector"] = state_of(self.new_projector())
        return state

    def payload(self, state: State, round_idx: int) -> State:
        out = {k: state[k] for k in ("model", "projector") if k in state}
        if "pseudo_pending" in state and bool(state["pseudo_pending"].any()):
            out["pseudo_x"] = state["pseudo_x"]
        return out

    def aggregate(self, state: State, updates: list[ClientUpdate], round_idx: int) -> State:
        if not updates:
            return state
        mean = weighted_average([u.tensors for u in updates], [1.0] * len(updates))  # uniform (Alg. 1)
        new = {**state, "model": {k: v for k, v in mean.items() if not k.startswith(PROJECTOR_PREFIX)}}
        if "projector" in state:
            new["projector"] = {k[len(PROJECTOR_PREFIX):]: v for k, v in mean.items() if k.startswith(PROJECTOR_PREFIX)}
        if "pseudo_pending" in state:
            pending = state["pseudo_pending"].clone()
            for u in updates:
                pending[u.client_id] = u.metrics.get("pseudo_missing", 0.0) > 0
            new["pseudo_pending"] = pending
        return new

    # ------------------------------------------------------------------ client half
    def client_update(self, payload: State, data: ClientData, client_state: State, ctx: RoundContext):
        if "pseudo_x" in payload:
            client_state = {**client_state, "pseudo_x": payload["pseudo_x"]}
        model = self.working_model(payload["model"], device=ctx.device)
        projector = self.working_projector(payload.get("projector"), device=ctx.device)
        if self.uses_pseudo_data and "pseudo_x" not in client_state:
            # this client's state was lost after it confirmed D_p (actor restart without a checkpoint):
            # a plain supervised round, and ask the server to send D_p again
            metrics = {"train_loss": train_supervised(model, data, ctx), "pseudo_missing": 1.0}
        else:
            frozen = self.working_model(payload["model"], key="frozen", device=ctx.device).eval()
            metrics = {"train_loss": self.train_locally(model, projector, frozen, client_state.get("pseudo_x"),
                                                        data, ctx)}
        tensors = state_of(model)
        if self.trains_projector:
            tensors.update({PROJECTOR_PREFIX + k: v for k, v in state_of(projector).items()})
        return ClientUpdate(data.client_id, data.num_samples, tensors=tensors, metrics=metrics), client_state

    def train_locally(self, model: nn.Module, projector: nn.Module, frozen: nn.Module,
                      pseudo_x: torch.Tensor | None, data: ClientData, ctx: RoundContext) -> float:
        """K iterations of (max step on θ, min step on φ, ω) (Alg. 1 lines 6–11); the mean min-step loss."""
        p = self.params
        model.train()
        gen_opt = make_optimizer(model.parameters(), ctx)
        disc_opt = make_optimizer(projector.parameters(), ctx) if self.trains_projector and p.max_step else None
        x_base = y_base = z_g_cached = None
        if pseudo_x is not None:
            x_base = pseudo_x.to(ctx.device)
            y_base = uniform_labels(len(x_base), self.num_classes, device=ctx.device)
            if p.use_contrastive and p.pseudo_data == "rsm":
                z_g_cached = self.global_features(frozen, x_base)  # D_p is fixed: φ_g(x_p) once per round
        mix_rng = mixing_rng(ctx.seed, ctx.round, data.client_id) if p.mixup else None
        total, count = 0.0, 0
        for x, y in local_batches(data, ctx):
            x_p, y_p, z_g, neg_weight, mix = x_base, y_base, z_g_cached, None, None
            if mix_rng is not None:
                x, y_other, lam = mixed_batch(x, y, p.mixup_alpha, mix_rng)
                mix = (y_other, lam)
            if x_base is not None and p.pseudo_data == "mixture":
                labels = y if mix is None else soft_labels(y, self.num_classes, mix).to(y_base.dtype)
                x_p, y_p = mix_pseudo(x_base, y_base, x, labels, p.mixture_k, ctx.generator)
                if p.use_contrastive:
                    z_g = self.global_features(frozen, x_p)  # re-mixed every step: no caching (§3.1)
                if p.mixture_correction:
                    # ⟨ỹ_p, y⟩ with the real sample's (soft) label
                    neg_weight = y_p.gather(1, paired(y, len(y_p))[:, None]).squeeze(1) if mix is None else \
                        (y_p * paired(labels, len(y_p))).sum(dim=1)
            z_x = model.features(x)
            z_p = model.features(x_p) if x_p is not None else None
            if disc_opt is not None:
                max_step(projector, disc_opt, z_p, z_g, paired(z_x, len(z_p)), p, ctx, neg_weight)
            loss = min_loss(model, projector, z_p, z_g, z_x, y, y_p, p, neg_weight, mix)
            step(gen_opt, loss, model, ctx)
            total += float(loss.detach())
            count += 1
        return total / max(count, 1)

    @staticmethod
    @torch.no_grad()
    def global_features(frozen: nn.Module, x_p: torch.Tensor) -> torch.Tensor:
        """φ_g(x_p): the round-start global extractor, frozen and without gradients (§3.1)."""
        return frozen.features(x_p)
