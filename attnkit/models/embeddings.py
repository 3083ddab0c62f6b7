"""Token embeddings scaled by sqrt(d_model), plus positions and dropout (§3.4, §3.5)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class TokenEmbedding(nn.Module):
    """``ids (B, T) -> (B, T, D)``, multiplied by ``sqrt(D)`` as in §3.4.

    Initialised with std ``D**-0.5`` so the scaled embeddings have unit
    variance, matching the positions' scale; the same matrix may also serve as
    the output projection (weight tying).
    """

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        nn.init.normal_(self.weight, std=d_model**-0.5)
        self.scale = math.sqrt(d_model)

    def forward(self, ids: Tensor) -> Tensor:
        return nn.functional.embedding(ids, self.weight) * self.scale


class InputEmbedding(nn.Module):
    """Token embedding + absolute positions, then dropout (§5.4: "to the sums")."""

    def __init__(self, tokens: TokenEmbedding, positions: nn.Module, dropout: float):
        super().__init__()
        self.tokens = tokens
        self.positions = positions
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:
        """``ids`` ``(B, T)`` at positions ``offset ..`` -> ``(B, T, D)``."""
        return self.dropout(self.tokens(ids) + self.positions(ids.size(1), offset))
