"""FedDyn (Acar et al. 2021, "Federated Learning Based on Dynamic Regularization"): a dynamic linear and quadratic
regulariser that makes each client's stationary points agree with the global one (docs/methods/feddyn.md).

Client k, holding its gradient state ∇L_k(θ_k^{t−1}) (zero at first; its persistent state), starts from the
global model θ^{t−1} and minimises (Algorithm 1, eq. in step "client"):

    CE(θ) − ⟨∇L_k(θ_k^{t−1}), θ⟩ + (α/2)·‖θ − θ^{t−1}‖²

then updates its state by the first-order condition: ∇L_k(θ_k^t) = ∇L_k(θ_k^{t−1}) − α·(θ_k^t − θ^{t−1}), and
sends θ_k^t. The server keeps h (zero at first):

    h^t = h^{t−1} − α·(1/m)·Σ_{k∈P_t}(θ_k^t − θ^{t−1}),     θ^t = (1/|P_t|)·Σ_{k∈P_t} θ_k^t − h^t/α

with m every client. The mean is uniform, as in the paper (algorithm.averaging: samples weighs it by n_k). Both
regulariser terms are a `local_loss`, so FedDyn trains on both engines.

`alpha_per_client` (the authors' code, `alpha_coef / weight_list[clnt]`): client k's α is α_k = α / (n_k / n̄), n̄
the mean sample count over all m clients, which every client sends once before round 0 (the set-up exchange); it
replaces α in the client's objective and state update. The server's h/α is −(1/m)·Σ_rounds Σ_k (θ_k − θ),
whatever α, so the server step is unchanged (the code's cloud model: the active mean plus the mean over all
clients of Σ(θ_k − θ)).
"""
from __future__ import annotations

import torch
from pydantic import Field

from tasks.algorithms.base import (
    Algorithm,
    ClientUpdate,
    HyperParams,
    LocalObjective,
    cross_entropy,
    on_device,
    searchable,
    state_of,
    weighted_average,
)
from tasks.algorithms.fedprox import proximal_term
from tasks.algorithms.registry import register
from tasks.algorithms.scaffold import zeros_like_parameters


class FedDynParams(HyperParams):
    alpha: float = searchable(0.01, 1e-3, 0.1, log=True, gt=0, description="α: weight of the dynamic regulariser")
    alpha_per_client: bool = Field(False, description="client k's α scaled to α / (n_k / n̄), n̄ the mean sample count "
                                   "over all clients (the authors' code); false: one α for every client (the paper)")


def linear_term(params: dict[str, torch.Tensor], grad_state: dict[str, torch.Tensor]) -> torch.Tensor:
    """−⟨∇L_k(θ_k^{t−1}), θ⟩ over the parameters, by name."""
    return -sum((p * grad_state[name]).sum() for name, p in params.items())


@register
class FedDyn(Algorithm):
    name = "feddyn"
    Params = FedDynParams
    default_averaging = "uniform"
    follows_averaging = True

    def init_global(self):
        model = self.new_model()
        return {"model": state_of(model), "h": zeros_like_parameters(model)}

    def init_client(self, data):
        return {"grad": zeros_like_parameters(self.working_model())}

    # ------------------------------------------------------------------ the set-up exchange (alpha_per_client)
    def client_setup(self, data, generator):
        if not self.params.alpha_per_client:
            return {}
        return {"samples": torch.tensor(float(data.num_samples), dtype=torch.float64)}

    def server_setup(self, state, contributions):
        counts = [c["samples"] for c in contributions if "samples" in c]
        return {**state, "mean_samples": torch.stack(counts).mean()} if counts else state

    def payload(self, state, round_idx):
        return {k: v for k, v in state.items() if k in ("model", "mean_samples")}

    def client_alpha(self, payload, data) -> float:
        """α, or with alpha_per_client α_k = α / (n_k / n̄) (the authors' code's alpha_coef / weight_list[k])."""
        if not self.params.alpha_per_client:
            return self.params.alpha
        if "mean_samples" not in payload:
            raise ValueError("feddyn: alpha_per_client needs every client's sample count, sent in the set-up exchange")
        return self.params.alpha * float(payload["mean_samples"]) / max(data.num_samples, 1)

    # ------------------------------------------------------------------ client half
    def local_objective(self, payload, data, client_state, ctx):
        inputs = {"anchor": on_device(payload["model"], ctx.device), "grad": on_device(client_state["grad"], ctx.device)}
        if self.params.alpha_per_client:  # a tensor, so the vectorized engine stacks it per client
            inputs["alpha"] = torch.tensor(self.client_alpha(payload, data), device=ctx.device)
        return LocalObjective(start=payload["model"], inputs=inputs)

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        """CE − ⟨∇L_k(θ_k^{t−1}), θ⟩ + (α_k/2)·‖θ − θ^{t−1}‖² (docs/methods/feddyn.md §2)."""
        return (cross_entropy(logits, y, weight) + linear_term(params, inputs["grad"])
                + proximal_term(params, inputs["anchor"], inputs.get("alpha", self.params.alpha)))

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        alpha, start = self.client_alpha(payload, data), on_device(payload["model"], "cpu")  # where `trained` is
        grad = {k: g - alpha * (trained[k] - start[k]) for k, g in client_state["grad"].items()}
        return ClientUpdate(data.client_id, data.num_samples, tensors=trained,
                            metrics={"train_loss": train_loss}), {"grad": grad}

    def aggregate(self, state, updates, round_idx):
        """h ← h − α·(1/m)·Σ(θ_k − θ); θ ← mean θ_k − h/α (docs/methods/feddyn.md §3)."""
        if not updates:
            return state
        alpha, start, m = self.params.alpha, state["model"], self.setup.num_clients
        h = {k: v - alpha * sum(u.tensors[k] - start[k] for u in updates) / m for k, v in state["h"].items()}
        model = weighted_average([u.tensors for u in updates], self.aggregation_weights(updates))
        model = {**model, **{k: model[k] - h[k] / alpha for k in h}}
        return {**state, "model": model, "h": h}
