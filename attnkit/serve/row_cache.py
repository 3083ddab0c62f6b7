"""A static KV cache whose rows start at different positions: sequences that join a batch.

Continuous batching feeds every row of the batch at one shared position ``P``
(one ``position_offset`` for the whole cache, as the decoding protocol has
it). A sequence that joins at ``P`` with a prompt of ``T`` tokens is placed so
that its last prompt token is fed at ``P``: its first ``T - 1`` tokens sit at
positions ``P - T + 1 .. P - 1`` and the row's ``start`` is ``P - T + 1``. The
row's keys before ``start`` (another sequence's, or zeros) are masked out.

This is exact only where attention depends on *relative* positions: rotary
(RoPE) and ALiBi terms, or none. Then the row computes what the sequence alone
computes from position 0 (up to float rounding in the rotary angles). Learned
or sinusoidal absolute positions would see shifted positions: the scheduler
(``attnkit.serve.continuous``) is not used for them.

Shapes: ``B`` rows, ``h`` key/value heads, ``C`` capacity, ``d`` head dim, ``t`` new tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Self

import torch
from torch import Tensor

from attnkit.attention.static_cache import StaticKVCache

__all__ = ["RowStartCache"]


class RowStartCache(StaticKVCache):
    """``StaticKVCache`` plus ``start`` ``(B,)``: row ``b`` sees keys ``start[b] .. pos``.

    Rows are added with ``merge`` and removed with ``reorder``; the capacity
    grows with ``grow``; ``shift`` moves the positions (the buffers are not pooled:
    their shapes change).
    """

    start: Tensor  # (B,) long

    @classmethod
    def empty(
        cls, num_layers: int, num_heads: int, head_dim: int, *, capacity: int, position: int,
        rows: int, dtype: torch.dtype, device: torch.device,
    ) -> RowStartCache:  # fmt: skip
        """``rows`` rows at ``position``, every row starting there (nothing cached yet)."""
        base = StaticKVCache.allocate(num_layers, rows, num_heads, head_dim, capacity=capacity,
                                      dtype=dtype, device=device)  # fmt: skip
        cache = cls(base.self_k, base.self_v, None, None, base.pos, length=position)
        cache.pos.fill_(position)
        cache.start = torch.full((rows,), position, dtype=torch.long, device=device)
        return cache

    def self_mask(self, t: int = 1) -> Tensor:
        """``(B, 1, t, C)`` bool: query ``i`` of row ``b`` sees keys ``start[b] .. pos + i``."""
        keys = torch.arange(self.capacity, device=self.pos.device)
        causal = keys[None, :] <= self.positions(t)[:, None]  # (t, C)
        mine = keys[None, :] >= self.start[:, None]  # (B, C)
        return (causal[None, :, :] & mine[:, None, :])[:, None]

    def reorder(self, indices: Tensor, *, cross: bool | Tensor = True) -> Self:
        super().reorder(indices, cross=cross)
        self.start = self.start.index_select(0, indices)
        return self

    def grow(self, capacity: int) -> None:
        """Make room for ``capacity`` positions (the cached ones are kept)."""
        extra = capacity - self.capacity
        if extra <= 0:
            return
        for buffers in (self.self_k, self.self_v):
            for i, old in enumerate(buffers):
                pad = old.new_zeros(*old.shape[:2], extra, old.size(3))
                buffers[i] = torch.cat([old, pad], dim=2)

    def shift(self, by: int, rotate: Callable[[Tensor, int], Tensor] | None = None) -> None:
        """Move every cached position (and the shared one) ``by`` to the right: ``by > 0``
        puts ``by`` empty columns first (room for a longer prompt to join), ``by < 0``
        drops the first ``-by`` columns, which no row may see (every ``start`` at or past
        them). The capacity stays, unless the cached positions need more.

        Attention over relative positions is unchanged if the cached keys move with
        their positions: ALiBi and no positions need nothing, rotary keys are turned
        by ``by`` positions with ``rotate(keys, by)``.
        """
        if by == 0:
            return
        if by < 0 and -by > int(self.start.min()):
            raise ValueError(f"shift: a row starts before column {-by}")
        keep = max(self.capacity, self.length + by)
        for buffers in (self.self_k, self.self_v):
            for i, old in enumerate(buffers):
                if by < 0:
                    buffers[i] = old[:, :, -by:].contiguous()
                else:
                    pad = old.new_zeros(*old.shape[:2], by, old.size(3))
                    buffers[i] = torch.cat([pad, old], dim=2)[:, :, :keep]
        if rotate is not None:
            self.self_k = [rotate(k, by) for k in self.self_k]
        self.pos += by
        self.length += by
        self.start = self.start + by

    def merge(self, other: RowStartCache, repeat: int = 1) -> None:
        """Append ``other``'s rows (each ``repeat`` times) at the end; same position."""
        if other.capacity < self.capacity:
            other.grow(self.capacity)
        self.grow(other.capacity)
        for mine, theirs in ((self.self_k, other.self_k), (self.self_v, other.self_v)):
            for i, rows in enumerate(theirs):
                mine[i] = torch.cat([mine[i], rows.repeat_interleave(repeat, dim=0)], dim=0)
        self.start = torch.cat([self.start, other.start.repeat_interleave(repeat)])

    @property
    def rows(self) -> int:
        return self.start.size(0)
