"""Learned absolute position embeddings (the paper's Table 3, row (E))."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.roles import Roles


class LearnedPositions(nn.Module):
    """One trained vector per position ``0 .. max_len - 1``."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, std=d_model**-0.5)

    def roles(self) -> Roles:
        return Roles(parameters={"weight": "position"})

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Returns ``(T, D)``."""
        if offset + length > self.max_len:
            raise ValueError(
                f"max_len: sequence of {offset + length} positions exceeds max_len={self.max_len}"
            )
        return self.weight[offset : offset + length]

    def at(self, index: Tensor) -> Tensor:
        """Encodings ``(t, D)`` of the positions in ``index`` ``(t,)`` (a device tensor,
        so a compiled decode step never reads a changing Python number); ``(B, t, D)``
        for per-row positions ``(B, t)`` (``attnkit.attention.ragged_cache``)."""
        return nn.functional.embedding(index, self.weight)
