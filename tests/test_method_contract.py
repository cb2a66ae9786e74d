"""The method contract (docs/method-contract.md) covers the interface as the code has it: every public attribute and
hook of `Algorithm` is named there, every hook with the parameters it has now, and every field of the types a hook
receives or returns (RoundContext, ClientUpdate, LocalObjective, ClientData). A hook added, renamed or given another
parameter without the page fails here; and the check of rule 1 for a loss finds a loss that breaks it."""
from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
import torch

from orchestrator.server.engine_check import engine_differences, padded
from tasks.algorithms.base import Algorithm, ClientData, ClientUpdate, LocalObjective, RoundContext

PAGE = (Path(__file__).resolve().parents[1] / "docs" / "method-contract.md").read_text(encoding="utf-8")


def public_attributes() -> list[str]:
    """Algorithm's own, then those of its client side and its server side."""
    sides = [cls for cls in Algorithm.__mro__ if cls is not object]
    return list(dict.fromkeys(name for cls in sides for name in vars(cls) if not name.startswith("_")))


def written_signature(name: str) -> str | None:
    """`name(a, b, c=None)` as the page writes a hook: its parameters without `self` or annotations; None for an
    attribute that is no method."""
    member = inspect.getattr_static(Algorithm, name)
    function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
    if not inspect.isfunction(function):
        return None
    params = list(inspect.signature(function).parameters.values())
    if not isinstance(member, staticmethod):
        params = params[1:]  # self, cls
    return f"{name}({', '.join(p.name if p.default is p.empty else f'{p.name}={default(p.default)}' for p in params)})"


def default(value) -> str:
    """A default as the page (and the source) writes it: strings in double quotes."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


def test_the_interface_has_the_hooks_this_test_knows_of():
    assert {"local_loss", "client_result", "aggregate", "step_hooks", "plain_sgd", "capabilities",
            "server_pre_round", "averaging", "new_model"} <= set(public_attributes())
    assert written_signature("local_loss") == "local_loss(params, x, y, h, logits, inputs, weight=None)"
    assert written_signature("capabilities") == "capabilities()" and written_signature("plain_sgd") is None


@pytest.mark.parametrize("name", public_attributes())
def test_every_public_attribute_of_algorithm_is_on_the_contract_page_with_its_signature(name):
    assert f"`{name}" in PAGE, f"Algorithm.{name} is not named on docs/method-contract.md"
    written = written_signature(name)
    if written is not None and not isinstance(inspect.getattr_static(Algorithm, name), classmethod):
        assert f"`{written}`" in PAGE, f"docs/method-contract.md does not write {written}"


@pytest.mark.parametrize("kind", [RoundContext, ClientUpdate, LocalObjective, ClientData])
def test_every_field_of_the_types_hooks_exchange_is_on_the_contract_page(kind):
    section = PAGE[PAGE.index(f"**`{kind.__name__}`**"):]
    section = section[:section.index("\n\n")]
    names = [f.name for f in dataclasses.fields(kind)]
    names += [n for n, v in vars(kind).items() if isinstance(v, property) or (inspect.isfunction(v)
                                                                               and not n.startswith("_"))]
    missing = [n for n in names if f"`{n}" not in section]
    assert not missing, f"{kind.__name__}'s {missing} not described on docs/method-contract.md"


class PlainMean(Algorithm):
    """Breaks rule 1 of "Rules for a loss": a plain batch mean that counts the vectorized engine's padding."""

    name = "plain_mean"

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        return torch.nn.functional.cross_entropy(logits, y)


def test_the_engine_check_new_methods_get_finds_a_loss_that_ignores_the_padding(tmp_path):
    """What `mooring new method`'s written test runs: on its uneven federation batches are padded, FedProx's loss
    (which honours `weight`) trains alike on both engines, and a plain mean does not."""
    assert padded(tmp_path)
    assert engine_differences("fedprox", tmp_path, rounds=1) == []
    found = engine_differences(PlainMean, tmp_path, rounds=1)
    assert all(line.startswith("round 0 client ") for line in found), found
    assert any(" tensors." in line and "differs by up to" in line for line in found), found
    assert any(" metrics.train_loss: " in line for line in found), found
