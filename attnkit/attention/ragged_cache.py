"""A key/value cache whose rows hold different lengths: prompts of different lengths
decoded in one batch, each row at its own positions.

Row ``b`` holds keys at positions ``0 .. lengths[b] - 1`` (its own prompt, then what
it generated) and feeds its next token at ``lengths[b]``: so every row computes
what it computes alone, whatever its position embeddings (learned, sinusoidal,
rotary: the positions are the row's own, ``position_offset()`` is ``(B, 1)``), and
no row reads another's padding. The columns past a row's length hold padding's
keys, or nothing yet; ``self_mask`` hides them and the row's next tokens
overwrite them.

How a batch of prompts gets here (``attnkit.decoding.ragged``): the prompts,
right-padded, are prefilled together from position 0 (causal: a real token
never sees the padding after it), then ``set_lengths`` puts each row back at
its own last prompt token, which the first step feeds again.

Position terms computed from key columns (ALiBi, T5's bias, a local window)
and Shaw's relative terms need one shared position: not for this cache.

Shapes: ``L`` layers, ``B`` rows, ``h`` key/value heads, ``C`` capacity, ``d`` head dim,
``t`` new tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

import torch
from torch import Tensor

from attnkit.attention.cache import LayerCache, LayerView


class RaggedKVCache:
    """Keys/values of rows of different lengths (see the module doc); a ``DecoderCache``.

    ``pos`` ``(B,)`` long: each row's length (where its next token goes), on the
    device; ``length``: the longest row's, on the host (capacity checks).
    """

    cross_k: Tensor | None = None  # a decoder-only cache: no cross-attention
    cross_v: Tensor | None = None

    def __init__(self, self_k: list[Tensor], self_v: list[Tensor], pos: Tensor) -> None:
        self.self_k, self.self_v = self_k, self_v  # L x (B, h, C, d)
        self.pos = pos
        self.length = int(pos.max()) if pos.numel() else 0

    @classmethod
    def allocate(
        cls,
        num_layers: int,
        batch_size: int,
        num_heads: int,
        head_dim: int,
        *,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> RaggedKVCache:
        """An empty cache of ``capacity`` positions per row, every row at position 0."""
        if capacity < 1:
            raise ValueError(f"capacity: must be >= 1, got {capacity}")
        shape = (batch_size, num_heads, capacity, head_dim)
        k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        return cls(k, v, torch.zeros(batch_size, dtype=torch.long, device=device))

    @property
    def capacity(self) -> int:
        return self.self_k[0].size(2)

    @property
    def device(self) -> torch.device:
        return self.pos.device

    def layers(self) -> Sequence[LayerCache]:
        return [LayerView(self, i) for i in range(len(self.self_k))]

    def set_lengths(self, lengths: Tensor) -> None:
        """Put row ``b`` at position ``lengths[b]`` (``(B,)``); keys past it are hidden."""
        if lengths.shape != self.pos.shape:
            raise ValueError(
                f"lengths: expected {tuple(self.pos.shape)}, got {tuple(lengths.shape)}"
            )
        self.pos = lengths.to(device=self.device, dtype=torch.long).clone()
        self.length = int(self.pos.max()) if self.pos.numel() else 0

    def position_offset(self) -> Tensor:
        """``(B, 1)``: each row's next position (``offset + arange(t)`` gives ``(B, t)``)."""
        return self.pos[:, None]

    def positions(self, t: int = 1) -> Tensor:
        """``(B, t)``: each row's positions of its next ``t`` tokens."""
        return self.pos[:, None] + torch.arange(t, device=self.device)

    def self_mask(self, t: int = 1) -> Tensor:
        """``(B, 1, t, C)`` bool, True = may attend: row ``b``'s query ``i`` sees its keys
        ``<= pos[b] + i``."""
        keys = torch.arange(self.capacity, device=self.device)
        return (keys[None, None, :] <= self.positions(t)[:, :, None])[:, None]

    def update_layer(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``(B, h, t, d)`` at each row's own positions; return the layer's buffers."""
        end = self.length + k.size(2)
        if end > self.capacity:
            raise ValueError(
                f"capacity: the cache holds {self.capacity} positions per row; a row at "
                f"{self.length} was fed {k.size(2)} more"
            )
        index = self.positions(k.size(2))[:, None, :, None].expand_as(k)
        self.self_k[layer].scatter_(2, index, k)
        self.self_v[layer].scatter_(2, index, v)
        return self.self_k[layer], self.self_v[layer]

    def advance(self, steps: int = 1) -> None:
        self.pos = self.pos + steps
        self.length += steps

    def reorder(self, indices: Tensor, *, cross: bool | Tensor = True) -> Self:
        """Keep rows ``indices`` ``(B',)`` in that order (``cross``: nothing to move here)."""
        self.self_k = [k.index_select(0, indices) for k in self.self_k]
        self.self_v = [v.index_select(0, indices) for v in self.self_v]
        self.pos = self.pos.index_select(0, indices)
        return self
