"""`mooring new method NAME`: a method file of your own and its test, to fill in.

Three templates, each a method that runs as written and a test that passes as written, in seconds:
- `--client` (the default): a method that changes the client's loss, FedProx's, as docs/design.md's "Adding a
  method" shows it (a test checks that the two agree); its test checks the loss against a hand computation on tiny
  tensors (change it with the loss), and that both engines train it alike on padded batches of a tiny federation
  (orchestrator/server/engine_check.py);
- `--server`: a method that changes the server's aggregation (a step of `server_lr` toward the clients' mean); its
  test checks the aggregation by hand and runs two rounds of a tiny federation end to end (`mooring.run`);
- `--stateful`: SCAFFOLD-sized (client state, server state, an extra upload), as that section's "A method with
  state" shows it; its test checks the control variate by hand, and both engines alike.
Nothing is overwritten.

Where the files go decides how the method is named (docs/method-contract.md, "Your method's files"): a `--dir` below
the working directory is a package, imported from the working directory (`--dir my_lab` makes
`my_lab.my_prox:MyProx`, writing `my_lab/__init__.py` where missing), as `mooring` and `pytest` run from there;
the working directory itself, or one outside it, or one whose path is no Python name, holds a flat module
(`my_prox:MyProx`), imported when `mooring` and `pytest` run from that directory."""
from __future__ import annotations

import keyword
from dataclasses import dataclass
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

TEST = '''"""{cls}'s loss against a hand computation on tiny tensors, and both engines alike on it.
Run: {run}"""
import math

import torch

from orchestrator.server.engine_check import engine_differences
from tasks.algorithms.base import Setup
from {module} import {cls}, {cls}Params


def test_the_loss_is_cross_entropy_plus_half_mu_times_the_squared_distance_to_the_global_model():
    method = {cls}({cls}Params(mu=0.5), Setup(num_classes=2, input_shape=(1,), num_clients=1, model_name="mlp"))
    params = {{"w": torch.tensor([1.0, 2.0])}}
    anchor = {{"w": torch.tensor([0.0, 0.0])}}
    logits, y = torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([1])  # p(y) = 3 / (1 + 3)
    loss = method.local_loss(params, None, y, None, logits, {{"anchor": anchor}})
    assert math.isclose(loss.item(), -math.log(0.75) + 0.5 * 0.5 * (1.0 + 4.0), rel_tol=1e-6)

def test_both_engines_train_it_alike_on_padded_batches(tmp_path):
    """Six clients of unequal sizes, batch 8, a small model: the vectorized engine pads short batches with weight-0
    samples, so the loss must honour `weight` (docs/method-contract.md, "Rules for a loss"); the sequential engine is
    the reference."""
    assert engine_differences({cls}, tmp_path, "model.hidden=[16]") == []
'''


SERVER_METHOD = '''"""{cls}: FedAvg whose server steps `server_lr` of the way from the global model to the clients' weighted
mean (1 is FedAvg's mean), to replace with your aggregation."""
from tasks.algorithms.base import Algorithm, HyperParams, searchable, weighted_average


class {cls}Params(HyperParams):
    server_lr: float = searchable(1.0, 0.1, 2.0, gt=0, description="the server's step toward the clients' mean")


class {cls}(Algorithm):
    name = "{name}"
    Params = {cls}Params
    follows_averaging = True  # it weighs clients by aggregation_weights, so algorithm.averaging applies

    def aggregate(self, state, updates, round_idx):  # updates in client-id order; possibly none
        if not updates:
            return state
        mean = weighted_average([u.tensors for u in updates], self.aggregation_weights(updates))
        step = self.params.server_lr
        model = {{k: w + step * (mean[k] - w) if w.is_floating_point() else mean[k] for k, w in state["model"].items()}}
        return {{**state, "model": model}}
'''

SERVER_TEST = '''"""{cls}'s aggregation by hand on tiny tensors, and two rounds of it on a tiny federation.
Run: {run}"""
import torch

import mooring
from tasks.algorithms.base import ClientUpdate, Setup
from {module} import {cls}, {cls}Params

# four clients of the digits, a small model, two rounds, nothing tracked: a run of a few seconds
TINY = {{"data.num_clients": 4, "model.hidden": [16], "train.rounds": 2, "tracking.enabled": False}}


def test_the_server_steps_server_lr_of_the_way_to_the_clients_weighted_mean():
    method = {cls}({cls}Params(server_lr=0.5), Setup(num_classes=2, input_shape=(1,), num_clients=2, model_name="mlp"))
    state = {{"model": {{"w": torch.tensor([0.0, 0.0])}}}}
    updates = [ClientUpdate(0, 1, tensors={{"w": torch.tensor([4.0, 0.0])}}),  # 1 sample
               ClientUpdate(1, 3, tensors={{"w": torch.tensor([0.0, 4.0])}})]  # 3 samples: the mean is (1, 3)
    assert torch.allclose(method.aggregate(state, updates, 0)["model"]["w"], torch.tensor([0.5, 1.5]))


def test_two_rounds_of_a_tiny_federation_train_it(tmp_path):
    run = mooring.run(None, {{**TINY, "algorithm.name": "{module}:{cls}", "checkpoint.dir": str(tmp_path / "runs"),
                             "data.partitions_dir": str(tmp_path / "partitions")}}, progress=False)
    loss = run.history["train_loss"]
    assert list(loss.index) == [1, 2] and loss.iloc[1] < loss.iloc[0]  # the clients' loss fell
'''


STATEFUL_METHOD = '''"""{cls}: a method with client state, server state and an extra upload (SCAFFOLD's control variates), to
replace with yours. Clients step along g − c_i + c, keep c_i and send its change beside the model; the server keeps c."""
import torch

from tasks.algorithms.base import (
    Algorithm,
    ClientUpdate,
    LocalObjective,
    cross_entropy,
    on_device,
    state_of,
    weighted_average,
)
from tasks.algorithms.local_sgd import effective_steps


def zeros(model):
    return {{name: torch.zeros_like(p) for name, p in model.named_parameters()}}


class {cls}(Algorithm):
    name = "{name}"
    plain_sgd = "c_i's update divides by the momentum-weighted step count"  # Adam is refused

    def init_global(self):  # the server state: the model and c
        model = self.new_model()
        return {{"model": state_of(model), "c": zeros(model)}}

    def payload(self, state, round_idx):  # what goes down to each client of the round
        return {{"model": state["model"], "c": state["c"]}}

    def init_client(self, data):  # a client's state, kept between its rounds (and in checkpoints)
        return {{"c": zeros(self.working_model())}}

    def local_objective(self, payload, data, client_state, ctx):
        correction = {{k: c - client_state["c"][k].to(c.device) for k, c in payload["c"].items()}}
        return LocalObjective(start=payload["model"], inputs={{"correction": on_device(correction, ctx.device)}})

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):  # its gradient adds c − c_i
        linear = sum((p * inputs["correction"][name]).sum() for name, p in params.items())
        return cross_entropy(logits, y, weight) + linear

    def client_result(self, trained, train_loss, payload, data, client_state, ctx):
        steps = effective_steps(ctx.local_steps, ctx.train.momentum)  # K under plain SGD
        c, server_c, x = client_state["c"], on_device(payload["c"], "cpu"), on_device(payload["model"], "cpu")
        new_c = {{k: c[k] - server_c[k] + (x[k] - trained[k]) / (ctx.lr * steps) for k in c}}
        update = ClientUpdate(data.client_id, data.num_samples, tensors=trained, metrics={{"train_loss": train_loss}},
                              stats={{"delta_c": {{k: new_c[k] - c[k] for k in c}}}})  # the extra upload
        return update, {{"c": new_c}}

    def aggregate(self, state, updates, round_idx):
        if not updates:
            return state
        model = weighted_average([u.tensors for u in updates], [u.num_samples for u in updates])
        n = self.setup.num_clients
        c = {{k: v + sum(u.stats["delta_c"][k] for u in updates) / n for k, v in state["c"].items()}}
        return {{**state, "model": model, "c": c}}
'''

STATEFUL_TEST = '''"""{cls}'s control-variate update by hand (one client, one step), and both engines alike on it.
Run: {run}"""
import torch
import torch.nn.functional as F

from orchestrator.server.engine_check import engine_differences
from tasks.algorithms.base import ClientData, RoundContext, Setup, TrainSettings
from {module} import {cls}


def test_after_one_plain_sgd_step_the_client_variate_is_the_gradient_at_the_start():
    train = TrainSettings(lr=0.1, batch_size=3, local_epochs=1)  # three samples in one batch: one step
    setup = Setup(num_classes=2, input_shape=(3,), num_clients=2, model_name="mlp",
                  model_options={{"hidden": [], "feature_dim": 2}}, train=train)
    method = {cls}({cls}.Params(), setup)
    x, y = torch.tensor([[1.0, 0.0, 2.0], [0.5, -1.0, 0.0], [0.0, 1.0, 1.0]]), torch.tensor([0, 1, 1])
    state = method.init_global()
    state["c"] = {{k: torch.full_like(v, 0.3) for k, v in state["c"].items()}}  # any c and c_i
    client = {{"c": {{k: torch.full_like(v, -0.2) for k, v in state["c"].items()}}}}
    ctx = RoundContext(0, 0, train, torch.Generator().manual_seed(0), local_steps=1)
    data = ClientData(0, x, y, x[:0], y[:0], num_classes=2)
    update, new_client = method.client_update(method.payload(state, 0), data, client, ctx)
    model = method.new_model()
    model.load_state_dict(state["model"])
    F.cross_entropy(model(x), y).backward()
    for name, p in model.named_parameters():  # y = x − η(g + c − c_i), so c_i⁺ = c_i − c + (x − y)/η = g
        assert torch.allclose(new_client["c"][name], p.grad, atol=1e-5)
        assert torch.allclose(update.stats["delta_c"][name], p.grad + 0.2, atol=1e-5)

def test_both_engines_train_it_alike_on_padded_batches(tmp_path):
    """Six clients of unequal sizes, batch 8, a small model: the vectorized engine pads short batches with weight-0
    samples, so the loss must honour `weight` (docs/method-contract.md, "Rules for a loss"); the sequential engine is
    the reference."""
    assert engine_differences({cls}, tmp_path, "model.hidden=[16]") == []
'''

# --client, --server, --stateful: the method file and its test
TEMPLATES = {"client": (METHOD, TEST), "server": (SERVER_METHOD, SERVER_TEST),
             "stateful": (STATEFUL_METHOD, STATEFUL_TEST)}


def configure(parser) -> None:
    sub = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    method = sub.add_parser("method", help="write NAME.py (a method to fill in) and test_NAME.py")
    method.add_argument("name", help="the method's name: a Python identifier (my_prox, class MyProx), not a built-in "
                        "method's nor a module's that it would shadow (random, os, torch)")
    method.add_argument("--dir", default=".", help="where to write the two files (default: here)")
    template = method.add_mutually_exclusive_group()
    template.add_argument("--client", dest="template", action="store_const", const="client",
                          help="a method that changes the client's loss: FedProx's (the default)")
    template.add_argument("--server", dest="template", action="store_const", const="server",
                          help="a method that changes the server's aggregation: a step toward the clients' mean")
    template.add_argument("--stateful", dest="template", action="store_const", const="stateful",
                          help="a method with client state, server state and an extra upload (SCAFFOLD-sized)")
    method.set_defaults(template="client")


@dataclass(frozen=True)
class Layout:
    """Where a new method's module lives as Python imports it: `module` ("my_lab.my_prox", or "my_prox" flat), the
    directory to run `mooring` and `pytest` from, and the `__init__.py` files that make `--dir` a package."""

    module: str
    run_from: Path
    init_files: tuple[Path, ...] = ()


def layout(name: str, directory: Path, cwd: Path | None = None) -> Layout:
    """A package below the working directory, or a flat module run from `directory` (the module's docstring)."""
    cwd = (cwd or Path.cwd()).resolve()
    target = directory.resolve()
    try:
        parts = target.relative_to(cwd).parts
    except ValueError:
        parts = ()
    if not parts or not all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        return Layout(name, target)
    packages = [cwd.joinpath(*parts[:depth]) for depth in range(1, len(parts) + 1)]
    missing = tuple(p / "__init__.py" for p in packages if not (p / "__init__.py").exists())
    return Layout(".".join([*parts, name]), cwd, missing)


def method_files(name: str, template: str = "client", module: str | None = None) -> dict[str, str]:
    """{file name: text} of a new method NAME and its test from TEMPLATES[template] (the client's loss, the server's
    aggregation, SCAFFOLD's state); the test imports the method as `module` (default: NAME, a flat module)."""
    module = module or name
    values = {"name": name, "cls": method_class(name), "module": module, "run": test_command(module, name)}
    method, test = TEMPLATES[template]
    return {f"{name}.py": method.format(**values), f"test_{name}.py": test.format(**values)}


def check_name(name: str, directory: Path) -> None:
    """NAME must make a module and a class: a Python identifier whose class name (my_prox → MyProx) is one too,
    and not the name of a module that `import NAME` would otherwise find (random, os, torch, tasks)."""
    from orchestrator.experiment.config import ConfigError
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
    from orchestrator.experiment.config import ConfigError

    directory = Path(args.dir)
    check_name(args.name, directory)
    where = layout(args.name, directory)
    files = method_files(args.name, args.template, where.module)
    existing = [str(directory / f) for f in files if (directory / f).exists()]
    if existing:
        raise ConfigError(f"mooring new method: {', '.join(existing)} already exists; nothing was written")
    directory.mkdir(parents=True, exist_ok=True)
    for init in where.init_files:
        init.write_text("")
    for file_name, text in files.items():
        (directory / file_name).write_text(text)
    made = "".join(f", {init.relative_to(where.run_from)}" for init in where.init_files)
    print(f"wrote {directory / f'{args.name}.py'} and {directory / f'test_{args.name}.py'}{made}; from "
          f"{where.run_from}, name it as algorithm.name: {where.module}:{method_class(args.name)} and test it with "
          f"{test_command(where.module, args.name)}")
    return 0


def test_command(module: str, name: str) -> str:
    """The command that runs the method `module`'s test from the directory its module is imported from."""
    return f"python -m pytest {'/'.join([*module.split('.')[:-1], f'test_{name}.py'])}"


def method_class(name: str) -> str:
    """my_prox → MyProx."""
    return "".join(part.capitalize() for part in name.split("_"))
