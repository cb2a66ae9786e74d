"""A character model for next-character prediction (shakespeare, LEAF's Shakespeare and Sent140 as characters).

LEAF's Shakespeare model: an embedding of 8 per character, a 2-layer LSTM of 256 units, the last step's output
into a linear layer over the vocabulary. Here the recurrent cell is a GRU by default (`cell: lstm` gives LEAF's).
The last step's output is the feature h the anchor and prototype methods work on; `classifier` maps it to the
next character.

Both engines run it. torch.func has no batching rule for PyTorch's fused GRU and LSTM kernels, so under the
vectorized engine's vmap the same layers' parameters are applied step by step (`unrolled`, PyTorch's equations
for nn.GRU and nn.LSTM, equal to the fused kernels to float rounding: tests/test_text_models.py); the sequential
engine keeps the fused kernel.
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from tasks.data.text import VOCAB_SIZE
from tasks.models.base import FLModel, ModelParams, register_model


class CharRNNParams(ModelParams):
    vocab_size: int = Field(VOCAB_SIZE, ge=2, description="input token ids run 0..vocab_size−1 (LEAF's letters: 80)")
    embed_dim: int = Field(8, ge=1)
    hidden: int = Field(128, ge=1, description="units per recurrent layer (LEAF: 256); also the feature dimension")
    layers: int = Field(2, ge=1, le=8)
    cell: Literal["gru", "lstm"] = "gru"
    classifier_bias: bool = True


class CharRNN(FLModel):
    def __init__(self, input_shape: tuple[int, ...], num_classes: int, params: CharRNNParams):
        super().__init__()
        if len(input_shape) != 1:
            raise ValueError(f"model 'char_rnn' takes sequences of token ids (one dimension), the data has "
                             f"{'x'.join(map(str, input_shape))}")
        self.embedding = nn.Embedding(params.vocab_size, params.embed_dim)
        cell = nn.GRU if params.cell == "gru" else nn.LSTM
        self.rnn = cell(params.embed_dim, params.hidden, num_layers=params.layers, batch_first=True)
        self.feature_dim = params.hidden
        self.num_classes = num_classes
        self.classifier = nn.Linear(params.hidden, num_classes, bias=params.classifier_bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        e = self.embedding(x.long())
        if torch._C._functorch.is_functorch_wrapped_tensor(e):  # inside torch.func (the vectorized engine)
            return unrolled(self.rnn, e)
        out, _ = self.rnn(e)
        return out[:, -1]


def unrolled(rnn: nn.GRU | nn.LSTM, x: torch.Tensor) -> torch.Tensor:
    """The last step's output of a batch-first nn.GRU or nn.LSTM on x (N, L, E), one step at a time from its own
    parameters (PyTorch's documented equations; the gates packed r|z|n for the GRU, i|f|g|o for the LSTM)."""
    for layer in range(rnn.num_layers):
        w_ih, w_hh = getattr(rnn, f"weight_ih_l{layer}"), getattr(rnn, f"weight_hh_l{layer}")
        b_ih, b_hh = getattr(rnn, f"bias_ih_l{layer}"), getattr(rnn, f"bias_hh_l{layer}")
        inputs = x @ w_ih.T + b_ih  # every step's input projection at once
        h = x.new_zeros(x.shape[0], rnn.hidden_size)
        c = torch.zeros_like(h)
        outputs = []
        for t in range(x.shape[1]):
            gates_h = h @ w_hh.T + b_hh
            if isinstance(rnn, nn.GRU):
                i_r, i_z, i_n = inputs[:, t].chunk(3, dim=1)
                h_r, h_z, h_n = gates_h.chunk(3, dim=1)
                r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
                h = (1 - z) * torch.tanh(i_n + r * h_n) + z * h
            else:
                i, f, g, o = (inputs[:, t] + gates_h).chunk(4, dim=1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        x = torch.stack(outputs, dim=1)
    return x[:, -1]


register_model("char_rnn", CharRNNParams)(CharRNN)
