"""`Algorithm`'s two sides (tasks/algorithms/client_side.py, server_side.py): each side's protocol names exactly its
base class's hooks, with the same signatures, beside the method's name, capabilities and models; no hook is on both
sides; a method written against `Algorithm` overrides either side's hooks as before, and its capabilities see it."""
from __future__ import annotations

import inspect

import pytest
import torch

from tasks.algorithms.base import Algorithm, LocalObjective, cross_entropy
from tasks.algorithms.client_side import ClientAlgorithm, ClientSide
from tasks.algorithms.method_core import MethodCore
from tasks.algorithms.server_side import ServerAlgorithm, ServerSide
from tests.method_fixtures import tiny_method

WHOLE_METHOD = {"name", "capabilities", "working_model"}  # what both protocols read of the whole method
SIDES = [(ClientSide, ClientAlgorithm), (ServerSide, ServerAlgorithm)]


def hooks(side: type) -> set[str]:
    return {name for name in vars(side) if not name.startswith("_")}


def protocol_members(protocol: type) -> set[str]:
    """What the protocol and the protocols it extends name."""
    own = [p for p in protocol.__mro__ if p is not object and getattr(p, "_is_protocol", False)]
    return set().union(*(hooks(p) | set(vars(p).get("__annotations__", {})) for p in own)) - {"_is_protocol"}


def written_signature(owner: type, name: str) -> inspect.Signature:
    """The member's signature as its source writes it, without `self` or `cls`."""
    member = inspect.getattr_static(owner, name)
    function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
    signature = inspect.signature(function)
    return signature.replace(parameters=list(signature.parameters.values())[1:])


@pytest.mark.parametrize(("side", "protocol"), SIDES)
def test_each_protocol_names_its_side_s_hooks_with_their_signatures(side, protocol):
    assert protocol_members(protocol) == hooks(side) | WHOLE_METHOD
    different = [name for name in hooks(side) if written_signature(side, name) != written_signature(protocol, name)]
    assert not different, f"{protocol.__name__} writes other signatures than {side.__name__} for {different}"
    assert MethodCore in protocol.__mro__  # the whole method's part, written once for both sides
    for name in WHOLE_METHOD - {"name"}:
        assert written_signature(protocol, name) == written_signature(Algorithm, name), name


def test_the_sides_share_no_hook_and_algorithm_overrides_neither():
    assert "local_loss" in hooks(ClientSide) and "aggregate" in hooks(ServerSide)
    assert not hooks(ClientSide) & hooks(ServerSide)
    assert not (hooks(ClientSide) | hooks(ServerSide)) & set(vars(Algorithm))
    assert Algorithm.__mro__[1:3] == (ClientSide, ServerSide)


def test_a_method_is_both_a_client_algorithm_and_a_server_algorithm():
    method = tiny_method("fedavg")
    assert isinstance(method, ClientAlgorithm) and isinstance(method, ServerAlgorithm)
    assert not isinstance(object(), ClientAlgorithm) and not isinstance(object(), ServerAlgorithm)


class HalfMean(Algorithm):
    """Written against `Algorithm` as a method always was: a loss of its own and an aggregate of its own."""

    name = "half_mean"

    def local_objective(self, payload, data, client_state, ctx):
        return LocalObjective(start=payload["model"])

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        return 0.5 * cross_entropy(logits, y, weight)

    def aggregate(self, state, updates, round_idx):
        merged = super().aggregate(state, updates, round_idx)
        return {**merged, "model": {k: 0.5 * (v + state["model"][k]) for k, v in merged["model"].items()}}


def test_a_method_written_against_algorithm_overrides_hooks_of_both_sides():
    capabilities = HalfMean.capabilities()
    assert not capabilities.averages_models and capabilities.vectorizable and not capabilities.keeps_client_state
    assert HalfMean.aggregate is not ServerSide.aggregate and HalfMean.payload is ServerSide.payload
    assert HalfMean.local_loss is not ClientSide.local_loss and HalfMean.client_result is ClientSide.client_result
    logits, y = torch.tensor([[2.0, 0.0]]), torch.tensor([0])
    assert torch.equal(HalfMean.local_loss(None, {}, None, y, None, logits, {}), 0.5 * cross_entropy(logits, y))
