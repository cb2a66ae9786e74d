"""Mooring's local optimizers (tasks/algorithms/optimizers.py) update bitwise as torch.optim's classes do, and a
process that trains through them never imports torch._dynamo."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tasks.algorithms import optimizers


def trained(make, steps: int = 4) -> list[torch.Tensor]:
    """A tiny model's parameters after `steps` steps of `make(params)`; the bias of its second layer gets no
    gradient from step 2 on (a parameter a step must skip, as torch.optim skips it)."""
    torch.manual_seed(0)
    first, second = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)
    optimizer = make(list(first.parameters()) + list(second.parameters()))
    x = torch.randn(5, 3)
    for s in range(steps):
        optimizer.zero_grad(set_to_none=s % 2 == 0)
        out = second(torch.tanh(first(x)))
        (out.pow(2).sum() if s == 0 else (out - second.bias.detach()).pow(2).sum()).backward()
        if s > 0:
            second.bias.grad = None
        optimizer.step()
    return [p.detach().clone() for p in (*first.parameters(), *second.parameters())]


@pytest.mark.parametrize("momentum, weight_decay", [(0.0, 0.0), (0.9, 0.0), (0.5, 1e-2)])
def test_sgd_is_torch_sgd_bitwise(momentum, weight_decay):
    ours = trained(lambda p: optimizers.SGD(p, lr=0.1, momentum=momentum, weight_decay=weight_decay))
    torch_s = trained(lambda p: torch.optim.SGD(p, lr=0.1, momentum=momentum, weight_decay=weight_decay))
    assert all(torch.equal(a, b) for a, b in zip(ours, torch_s))


@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_adam_is_torch_adam_bitwise(weight_decay):
    ours = trained(lambda p: optimizers.Adam(p, lr=0.01, weight_decay=weight_decay))
    torch_a = trained(lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=weight_decay))
    assert all(torch.equal(a, b) for a, b in zip(ours, torch_a))


def test_one_sgd_step_by_hand():
    """w ← w − lr·(g + wd·w), then with momentum the buffer b ← μ·b + g' from the second step."""
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    sgd = optimizers.SGD([w], lr=0.5, momentum=0.5, weight_decay=0.1)
    w.grad = torch.tensor([1.0, 1.0])
    sgd.step()  # g' = [1.1, 0.8]; b = g'; w = [1 - 0.55, -2 - 0.4]
    assert torch.allclose(w.detach(), torch.tensor([0.45, -2.4]))
    w.grad = torch.tensor([0.0, 0.0])
    sgd.step()  # g' = [0.045, -0.24]; b = 0.5·[1.1, 0.8] + g' = [0.595, 0.16]; w -= 0.5·b
    assert torch.allclose(w.detach(), torch.tensor([0.45 - 0.2975, -2.4 - 0.08]))


def test_a_sequential_run_imports_no_torch_dynamo(tmp_path):
    """A client update on the sequential engine, in a fresh process: torch.optim's first optimizer would import
    torch._dynamo there (about 1.5 CPU-seconds)."""
    code = """
import sys
from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import run_in_process
cfg = load_config("configs/default.yaml", ["train.engine=sequential", "train.rounds=1", "data.num_clients=4",
                                           "resources.warm_up=false", sys.argv[1]])
history = run_in_process(cfg, prepare_data(cfg))
print(len(history), "torch._dynamo" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code, f"data.partitions_dir={tmp_path}"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "False"]
