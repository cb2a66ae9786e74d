"""SCAFFOLD (Karimireddy et al. 2020, "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning"), option II
(docs/methods/scaffold.md).

Client i starts from the global model x and corrects every local gradient by its control variates:
y ← y − η·(g_i(y) − c_i + c), which is SGD on CE(y) + ⟨c − c_i, y⟩ (the linear term's gradient is c − c_i), so the
correction is a `local_loss` and trains on both engines. After its K steps (§3, option II):

    c_i⁺ = c_i − c + (x − y_i)/(K·η)

and it sends y_i and Δc_i = c_i⁺ − c_i (twice FedAvg's bytes). The server (§3, eq. 5):

    x ← x + η_g·Σ_i w_i·(y_i − x) / Σ_i w_i,      c ← c + (1/N)·Σ_{i∈S} Δc_i

(w_i = n_i, or 1 under algorithm.averaging: uniform, the paper's 1/|S|; N = every client). Under SGD momentum β the
client's K steps weigh η·‖a‖₁ rather than K·η (tasks/algorithms/local_sgd.py), so option II divides by η·‖a‖₁:
the a-weighted mean of the corrected gradients, which is option II exactly when β = 0 (docs/methods/scaffold.md §4).
"""
from __future__ import annotations

import torch

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
from tasks.algorithms.local_sgd import effective_steps
from tasks.algorithms.registry import register


class ScaffoldParams(HyperParams):
    server_lr: float = searchable(1.0, 0.1, 1.0, log=True, gt=0, description="global step size η_g")


def zeros_like_parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A control variate at its start: zero for every trained parameter."""
    return {name: torch.zeros_like(p, device="cpu") for name, p in model.named_parameters()}


def correction_term(params: dict[str, torch.Tensor], correction: dict[str, torch.Tensor]) -> torch.Tensor:
    """⟨c − c_i, y⟩ summed over the parameters: adds c − c_i to every step's gradient."""
    return sum((p * correction[name]).sum() for name, p in params.items())


def option_two(client_c: dict, server_c: dict, start: dict, trained: dict, lr: float, weight: float) -> dict:
    """c_i⁺ = c_i − c + (x − y_i)/(lr·weight), weight = K (plain SGD) or ‖a‖₁ (momentum)."""
    return {name: client_c[name] - server_c[name] + (start[name] - trained[name]) / (lr * weight)
            for name in client_c}


@register
class Scaffold(Algorithm):
    name = "scaffold"
    shares = "the model and its control-variate change"
    Params = ScaffoldParams
    follows_averaging = True
    plain_sgd = ("option II divides x − y_i by η·‖a‖₁, the momentum-weighted step count, instead of K·η "
                 "(docs/methods/scaffold.md §4)")

    def init_global(self):
        model = self.new_model()
        return {"model": state_of(model), "c": zeros_like_parameters(model)}

    def payload(self, state, round_idx):
        return {"model": state["model"], "c": state["c"]}

    def init_client(self, data):
        return {"c": zeros_like_parameters(self.working_model())}

    def local_objective(self, payload, data, client_state, ctx):
        correction = {name: c - client_state["c"][name].to(c.device) for name, c in payload["c"].items()}
        return LocalObjective(start=payload["model"], inputs={"correction": on_device(correction, ctx.device)})

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        """CE + ⟨c − c_i, y⟩ (docs/methods/scaffold.md §2)."""
        return cross_entropy(logits, y, weight) + correction_term(params, inputs["correction"])

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        steps = effective_steps(ctx.local_steps, ctx.train.momentum)
        if steps == 0:  # a client without data takes no step and leaves its variate as it was
            new_c = client_state["c"]
        else:
            server_c, start = on_device(payload["c"], "cpu"), on_device(payload["model"], "cpu")  # as `trained` is
            new_c = option_two(client_state["c"], server_c, start, trained, ctx.lr, steps)
        delta_c = {name: new_c[name] - client_state["c"][name] for name in new_c}
        update = ClientUpdate(data.client_id, data.num_samples, tensors=trained, stats={"delta_c": delta_c},
                              metrics={"train_loss": train_loss})
        return update, {"c": new_c}

    def aggregate(self, state, updates, round_idx):
        """x ← x + η_g·(x̄ − x); c ← c + (1/N)·Σ Δc_i (docs/methods/scaffold.md §3)."""
        if not updates:
            return state
        x, eta = state["model"], self.params.server_lr
        mean = weighted_average([u.tensors for u in updates], self.aggregation_weights(updates))
        model = mean if eta == 1.0 else {k: x[k] + eta * (mean[k] - x[k]) if torch.is_floating_point(x[k])
                                         else mean[k] for k in x}
        n = self.setup.num_clients
        c = {k: v + sum(u.stats["delta_c"][k] for u in updates) / n for k, v in state["c"].items()}
        return {**state, "model": model, "c": c}
