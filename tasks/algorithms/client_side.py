"""A method's client side: the hooks a client's round calls, with FedAvg's behaviour (`ClientSide`, which
`Algorithm` inherits), and the method as the clients' runtime sees it (`ClientAlgorithm`: orchestrator/clients/
and the engines call nothing else of it).

    init_client(data) -> persistent client state (a personal head, a private model, ...)
    local_objective(payload, data, state_i, ctx) -> where training starts, what the loss reads, and the round's
                                                    phases if it has several (FedRep)
    local_loss(params, x, y, h, logits, inputs)  -> the per-batch loss (CE plus the method's term)
    client_result(trained, loss, ...)            -> the update sent up and the client's next state
    client_metrics(trained, loss, ...)           -> metrics sent up beside the loss (no client state)
    client_evaluate(...)                         -> personalized accuracy on the client's own test split
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from tasks.algorithms.local_training import LocalObjective, train_phases
from tasks.algorithms.losses import cross_entropy
from tasks.algorithms.method_core import MethodCore
from tasks.algorithms.model_state import state_of
from tasks.algorithms.prototypes import ClassMeans
from tasks.types import ClientData, ClientUpdate, RoundContext, State


class ClientSide:
    """The hooks a client's round calls, each FedAvg's; of the rest of the method they read only `working_model`
    (`Algorithm`'s per-process models)."""

    # one-off exchange before round 0 (FedDebias' shared pseudo-data): each client's contribution, which the
    # server's `server_setup` folds; it runs for a method that defines server_setup
    def client_setup(self, data: ClientData, generator: torch.Generator) -> State:
        return {}

    # an exchange at the start of every round, before training (FedFM's anchors from the broadcast model, eqs.
    # 8-9): each client's contribution, which the server's `server_pre_round` folds; it runs for a method that
    # defines server_pre_round
    def client_pre_round(self, payload: State, data: ClientData, client_state: State, ctx: RoundContext) -> State:
        return {}

    def init_client(self, data: ClientData) -> State:
        """Persistent per-client state, created on first use (seed it from setup.seed and data.client_id)."""
        return {}

    def local_objective(self, payload: State, data: ClientData, client_state: State,
                        ctx: RoundContext) -> LocalObjective:
        """Where this client's training starts and the tensors its `local_loss` reads this round."""
        return LocalObjective(start=payload["model"])

    def local_loss(self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, h: torch.Tensor,
                   logits: torch.Tensor, inputs: State, weight: torch.Tensor | None = None) -> torch.Tensor:
        """The per-batch loss as a function of the parameters (h, logits = the model's forward on x under them).

        `weight` (0/1 per sample, the vectorized engine's padding mask) turns every batch mean into a mean over
        the real samples; None (the sequential engine) is the plain mean. No in-place change of any module state:
        the vectorized engine calls it under `torch.func.vmap`."""
        return cross_entropy(logits, y, weight)

    def client_metrics(self, trained: State, train_loss: float, payload: State, data: ClientData,
                       client_state: State, ctx: RoundContext) -> dict[str, float]:
        """Metrics of the client's round sent up beside `train_loss` in its update's `metrics` (read them in
        `round_metrics`); defining it keeps no client state, as defining `client_result` does."""
        return {}

    def client_result(self, trained: State, train_loss: float, payload: State, data: ClientData,
                      client_state: State, ctx: RoundContext) -> tuple[ClientUpdate, State]:
        """The update sent up and the client's next state, from its trained model's tensors (CPU copies)."""
        metrics = {**self.client_metrics(trained, train_loss, payload, data, client_state, ctx),
                   "train_loss": train_loss}
        return ClientUpdate(data.client_id, data.num_samples, tensors=trained, metrics=metrics), client_state

    def client_update(self, payload: State, data: ClientData, client_state: State,
                      ctx: RoundContext) -> tuple[ClientUpdate, State]:
        """One client's round on the sequential engine (the bitwise reference)."""
        objective = self.local_objective(payload, data, client_state, ctx)
        model = self.working_model(objective.start, key=objective.model_key, device=ctx.device)
        if objective.record_seen:
            ctx.recorded = ClassMeans(data.num_classes, model.feature_dim, objective.record_clip)
        loss = train_phases(model, data, ctx, self.local_loss, objective)
        return self.client_result(state_of(model), loss, payload, data, client_state, ctx)

    def step_hooks(self, rounds: list, params: dict[str, torch.Tensor]) -> list:
        """The vectorized engine's side computations at every step for a batch of clients (`rounds`, its
        ClientRounds; `params`, their stacked trainable parameters, updated in place): each hook's
        after_step(h, y, weight, active) sees the step's stacked features (from before the step) once the
        optimizer has stepped, and hand_out(contexts) leaves each client's record in its ctx.recorded. The
        sequential engine's form is a recorder and an after_step in train_objective (FedFA). None here."""
        return []

    def client_evaluate(self, payload: State, data: ClientData, client_state: State,
                        ctx: RoundContext) -> dict[str, tuple[float, float]]:
        """Personalized evaluation: {metric: (correct, total)}; "acc" is the headline."""
        return {}

    def vectorized_refusal(self) -> str:
        """Why the vectorized engine cannot train this instance beyond what its class's capabilities say (a reason
        that depends on its hyperparameters or its models: FedSA's per_sample, FedProto's family), or ""."""
        return ""


@runtime_checkable
class ClientAlgorithm(MethodCore, Protocol):
    """A method as the clients' runtime calls it: `ClientSide`'s hooks and, of the whole method, its name, its
    capabilities and its per-process models."""

    def client_setup(self, data: ClientData, generator: torch.Generator) -> State: ...

    def client_pre_round(self, payload: State, data: ClientData, client_state: State,
                         ctx: RoundContext) -> State: ...

    def init_client(self, data: ClientData) -> State: ...

    def local_objective(self, payload: State, data: ClientData, client_state: State,
                        ctx: RoundContext) -> LocalObjective: ...

    def local_loss(self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, h: torch.Tensor,
                   logits: torch.Tensor, inputs: State, weight: torch.Tensor | None = None) -> torch.Tensor: ...

    def client_metrics(self, trained: State, train_loss: float, payload: State, data: ClientData,
                       client_state: State, ctx: RoundContext) -> dict[str, float]: ...

    def client_result(self, trained: State, train_loss: float, payload: State, data: ClientData,
                      client_state: State, ctx: RoundContext) -> tuple[ClientUpdate, State]: ...

    def client_update(self, payload: State, data: ClientData, client_state: State,
                      ctx: RoundContext) -> tuple[ClientUpdate, State]: ...

    def step_hooks(self, rounds: list, params: dict[str, torch.Tensor]) -> list: ...

    def client_evaluate(self, payload: State, data: ClientData, client_state: State,
                        ctx: RoundContext) -> dict[str, tuple[float, float]]: ...

    def vectorized_refusal(self) -> str: ...
