"""What a method can do, in one typed place: declared by its class attributes, or derived from the hooks it defines.

The runtime reads a method's `Capabilities` (`Algorithm.capabilities()`, computed once per class) and nothing else
to decide how to run it: which engine may train it, whether its clients stay on one actor, whether it has a set-up
or a pre-round exchange, a global model, a personalized evaluation, and whether partial sums may replace its
updates. Every field has a default that is correct for a method that defines only `Params` and `local_loss`
(FedProx-sized): vectorisable, no client state, a global model, no exchanges, FedAvg's averaging.

A hook "defined" here is one the method's class (or a mixin of it) gives instead of the base class's; a class
that assigns the base's hook back (FedFM-Lite's `server_pre_round = Algorithm.server_pre_round`) does not define it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Capabilities:
    """How the runtime treats a method; `Algorithm.capabilities()` says it for each method class."""

    # why the vectorized engine cannot train the method ("" = it can: its local training is a `local_loss`)
    not_vectorized: str = ""
    # a client's state persists between its rounds: it always trains on the actor that holds it (sticky)
    keeps_client_state: bool = False
    # its clients' own models are evaluated on their own test splits (`client_evaluate`)
    personalized: bool = False
    # `global_model(state)` is evaluated on the global test set
    global_model: bool = True
    # a one-off exchange before round 0 (`client_setup`, `server_setup`: FedDebias' pseudo-data)
    setup_exchange: bool = False
    # an exchange at the start of every round (`client_pre_round`, `server_pre_round`: FedFM's anchors)
    pre_round_exchange: bool = False
    # `aggregate` and `round_metrics` are FedAvg's: the server reads nothing of the updates but the
    # sample-weighted mean of their models, so sums of models may replace them (resources.partial_sums)
    averages_models: bool = True
    # the update sent up is the trained model and its loss as they are (FedAvg's `client_result`, no own
    # `client_update` or `client_metrics`)
    uploads_trained_model: bool = True
    # what goes down is FedAvg's `payload`, the global model alone (buffered aggregation may then run it)
    broadcasts_model: bool = True
    # side computations at every step of the vectorized engine (`step_hooks`: FedFA), so no shortcut may skip steps
    steps_with_hooks: bool = False

    @property
    def vectorizable(self) -> bool:
        return not self.not_vectorized


def defines(cls: type, base: type, hook: str) -> bool:
    """Whether `cls` gives `hook` a body of its own rather than `base`'s."""
    return getattr(cls, hook) is not getattr(base, hook)


@cache
def derive_capabilities(cls: type, base: type) -> Capabilities:
    """A method class's capabilities: its declarations (`not_vectorized`, `keeps_client_state`, `personalized`,
    `has_global_model`; None where a declaration is left to derivation) and the hooks it defines beyond `base`."""
    def has(hook: str) -> bool:
        return defines(cls, base, hook)

    own_training = has("client_update")
    keeps = cls.keeps_client_state
    if keeps is None:  # a method that never hands back a state of its own keeps none (client_metrics hands none)
        keeps = has("init_client") or has("client_result") or own_training
    personalized = cls.personalized if cls.personalized is not None else has("client_evaluate")
    return Capabilities(
        not_vectorized=cls.not_vectorized or own_training_refusal(cls, own_training and not has("step_hooks")),
        keeps_client_state=bool(keeps),
        personalized=bool(personalized),
        global_model=bool(cls.has_global_model),
        setup_exchange=has("server_setup"),
        pre_round_exchange=has("server_pre_round"),
        averages_models=not (has("aggregate") or has("round_metrics")),
        uploads_trained_model=not (has("client_result") or has("client_metrics") or own_training),
        broadcasts_model=not has("payload"),
        steps_with_hooks=has("step_hooks"),
    )


def own_training_refusal(cls: type, trains_itself: bool) -> str:
    """A method that trains in its own `client_update` without `step_hooks` (the vectorized form of its side
    computations, FedFA) has no loss the vectorized engine could train."""
    return f"{cls.name} trains in its own client_update, not through local_loss" if trains_itself else ""
