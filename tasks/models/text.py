"""A character model for next-character prediction (shakespeare, LEAF's Shakespeare and Sent140 as characters).

LEAF's Shakespeare model: an embedding of 8 per character, a 2-layer LSTM of 256 units, the last step's output
into a linear layer over the vocabulary. Here the recurrent cell is a GRU by default (`cell: lstm` gives LEAF's):
both engines run either, but torch.func has no batching rule for the LSTM's fused kernel, so the vectorized
engine runs an LSTM through its slow per-client fallback. The last step's output is the feature h the anchor and
prototype methods work on; `classifier` maps it to the next character.
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
        out, _ = self.rnn(self.embedding(x.long()))
        return out[:, -1]


register_model("char_rnn", CharRNNParams)(CharRNN)
