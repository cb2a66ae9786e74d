"""`mooring new method NAME`: a method file of your own and its test, to fill in.

The method is FedProx, as docs/design.md's "Adding a method" shows it (a test checks that the two agree): a
method that runs as written, whose loss you then replace with yours. The test checks its loss against a hand
computation on tiny tensors; change it with the loss. Nothing is overwritten."""
from __future__ import annotations

import keyword
from pathlib import Path

METHOD = '''"""{cls}: FedProx's loss, cross-entropy plus (mu/2)·‖w − w_global‖², to replace with yours."""
from tasks.algorithms.base import Algorithm, HyperParams, LocalObjective, cross_entropy, on_device, searchable


class {cls}Params(HyperParams):
    mu: float = searchable(0.01, 1e-3, 1.0, log=True, ge=0, description="proximal weight mu")


class {cls}(Algorithm):
    name = "{name}"
    Params = {cls}Params

    def local_objective(self, payload, data, client_state, ctx):
        return LocalObjective(start=payload["model"], inputs={{"anchor": on_device(payload["model"], ctx.device)}})

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        proximal = sum(((w - inputs["anchor"][name]) ** 2).sum() for name, w in params.items())
        return cross_entropy(logits, y, weight) + 0.5 * self.params.mu * proximal
'''

TEST = '''"""{cls}'s loss against a hand computation on tiny tensors (run: python -m pytest test_{name}.py)."""
import math

import torch

from tasks.algorithms.base import Setup
from {name} import {cls}, {cls}Params


def test_the_loss_is_cross_entropy_plus_half_mu_times_the_squared_distance_to_the_global_model():
    method = {cls}({cls}Params(mu=0.5), Setup(num_classes=2, input_shape=(1,), num_clients=1, model_name="mlp"))
    params = {{"w": torch.tensor([1.0, 2.0])}}
    anchor = {{"w": torch.tensor([0.0, 0.0])}}
    logits, y = torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([1])  # p(y) = 3 / (1 + 3)
    loss = method.local_loss(params, None, y, None, logits, {{"anchor": anchor}})
    assert math.isclose(loss.item(), -math.log(0.75) + 0.5 * 0.5 * (1.0 + 4.0), rel_tol=1e-6)
'''


def configure(parser) -> None:
    sub = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    method = sub.add_parser("method", help="write NAME.py (a method to fill in) and test_NAME.py")
    method.add_argument("name", help="the method's name: a Python identifier (my_prox, class MyProx), not a built-in "
                        "method's nor a module's that it would shadow (random, os, torch)")
    method.add_argument("--dir", default=".", help="where to write the two files (default: here)")


def method_files(name: str) -> dict[str, str]:
    """{file name: text} of a new method NAME and its test."""
    values = {"name": name, "cls": method_class(name)}
    return {f"{name}.py": METHOD.format(**values), f"test_{name}.py": TEST.format(**values)}


def check_name(name: str, directory: Path) -> None:
    """NAME must make a module and a class: a Python identifier whose class name (my_prox → MyProx) is one too,
    and not the name of a module that `import NAME` would otherwise find (random, os, torch, tasks)."""
    from orchestrator.config import ConfigError
    from tasks.algorithms import ALGORITHMS

    if not name.isidentifier() or keyword.iskeyword(name):
        raise ConfigError(f"mooring new method {name!r}: a method's name is a Python identifier (letters, digits, _)")
    cls = method_class(name)
    if not cls.isidentifier() or keyword.iskeyword(cls):
        raise ConfigError(f"mooring new method {name!r}: its class would be named {cls!r}, which is not a Python class "
                          "name; use letters and digits with _ between words (my_prox → MyProx)")
    if name in ALGORITHMS:
        raise ConfigError(f"mooring new method {name}: {name} is a built-in method's name; choose another")
    whose = shadowed_module(name, directory)
    if whose:
        raise ConfigError(f"mooring new method {name}: {name} is {whose}; {name}.py would shadow it wherever it is "
                          "imported from; choose another")


def shadowed_module(name: str, directory: Path) -> str | None:
    """Whose module `name` already names (None: nobody's, or only a file in `directory` itself)."""
    import importlib.util
    import sys

    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return "a standard library module"
    spec = importlib.util.find_spec(name)
    if spec is None or (spec.origin and Path(spec.origin).resolve().parent == directory.resolve()):
        return None
    return f"an installed module ({spec.origin or spec.name})"


def main(args) -> int:
    from orchestrator.config import ConfigError

    directory = Path(args.dir)
    check_name(args.name, directory)
    files = method_files(args.name)
    existing = [str(directory / f) for f in files if (directory / f).exists()]
    if existing:
        raise ConfigError(f"mooring new method: {', '.join(existing)} already exists; nothing was written")
    directory.mkdir(parents=True, exist_ok=True)
    for file_name, text in files.items():
        (directory / file_name).write_text(text)
    print(f"wrote {directory / f'{args.name}.py'} and {directory / f'test_{args.name}.py'}; from "
          f"{directory.resolve()}, name it as algorithm.name: {args.name}:{method_class(args.name)}")
    return 0


def method_class(name: str) -> str:
    """my_prox → MyProx."""
    return "".join(part.capitalize() for part in name.split("_"))
