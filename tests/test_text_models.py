"""The character model (tasks/models/text.py): its step-by-step recurrence equals PyTorch's fused kernels."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tasks.models import build_model
from tasks.models.text import unrolled


@pytest.mark.parametrize("cell", [nn.GRU, nn.LSTM])
def test_the_unrolled_recurrence_is_the_fused_kernels(cell):
    torch.manual_seed(0)
    rnn = cell(3, 5, num_layers=2, batch_first=True)
    x = torch.randn(4, 6, 3)
    fused, _ = rnn(x)
    assert torch.allclose(unrolled(rnn, x), fused[:, -1], atol=1e-6)


def test_the_model_runs_under_vmap_as_it_runs_plainly():
    torch.manual_seed(0)
    model = build_model("char_rnn", (7,), 80, {"hidden": 6, "layers": 1})
    params = {k: torch.stack([v.detach()] * 2) for k, v in model.named_parameters()}
    x = torch.randint(80, (2, 3, 7))
    batched = torch.func.vmap(lambda p, xb: torch.func.functional_call(model, p, (xb,)))(params, x)
    assert torch.allclose(batched[1], model(x[1]), atol=1e-6)
