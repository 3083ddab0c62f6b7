"""Sinusoidal position encodings, exactly as in §3.5 of the paper.

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Even dimensions hold sines and odd dimensions cosines (interleaved). The
table is a non-persistent buffer: it is recomputed, not stored in checkpoints.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """The ``(max_len, d_model)`` table of the paper's formula (fp32)."""
    if d_model % 2 != 0:
        raise ValueError(f"d_model: sinusoidal positions need an even d_model, got {d_model}")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    # 10000^(-2i/d) computed in log space, in float64 so large positions stay exact.
    inv_freq = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
    )
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)
    return table.float()


class SinusoidalPositions(nn.Module):
    """Fixed encodings for positions ``offset .. offset + T - 1``."""

    table: Tensor  # (max_len, D), a non-persistent buffer

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Returns ``(T, D)``."""
        if offset + length > self.max_len:
            raise ValueError(
                f"max_len: sequence of {offset + length} positions exceeds max_len={self.max_len}"
            )
        return self.table[offset : offset + length]

    def at(self, index: Tensor) -> Tensor:
        """Encodings ``(t, D)`` of the positions in ``index`` ``(t,)`` (a device tensor,
        so a compiled decode step never reads a changing Python number); ``(B, t, D)``
        for per-row positions ``(B, t)`` (``attnkit.attention.ragged_cache``)."""
        return nn.functional.embedding(index, self.table)
