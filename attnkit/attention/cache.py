"""An explicit key/value cache for incremental decoding.

One object holds every layer's keys and values, stacked so that beam search
reorders the whole cache with one ``index_select`` per tensor:

* self-attention keys/values ``(L, B, h, capacity, d)``, preallocated and
  filled one step at a time (``update`` then ``advance``);
* cross-attention keys/values ``(L, B, h, S, d)``, computed once from the
  encoder output and never recomputed.

Shapes: ``L`` layers, ``B`` batch rows (sentences x beams), ``h`` heads,
``S`` source length, ``d`` head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Keys and values of every decoder layer, with ``reorder`` for beams."""

    def __init__(
        self,
        num_layers: int,
        batch_size: int,
        num_heads: int,
        head_dim: int,
        *,
        capacity: int = 64,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        shape = (num_layers, batch_size, num_heads, capacity, head_dim)
        self.self_k = torch.zeros(shape, dtype=dtype, device=device)
        self.self_v = torch.zeros(shape, dtype=dtype, device=device)
        self.cross_k: Tensor | None = None
        self.cross_v: Tensor | None = None
        self.length = 0  # number of target positions already cached

    @property
    def capacity(self) -> int:
        return self.self_k.size(3)

    def set_cross(self, k: Tensor, v: Tensor) -> None:
        """Store cross-attention keys/values ``(L, B, h, S, d)`` computed once."""
        self.cross_k, self.cross_v = k, v

    def cross(self, layer: int) -> tuple[Tensor, Tensor]:
        """Cross-attention keys/values of one layer, ``(B, h, S, d)`` each."""
        if self.cross_k is None or self.cross_v is None:
            raise RuntimeError("cross-attention keys/values were never set (call set_cross)")
        return self.cross_k[layer], self.cross_v[layer]

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write the new ``(B, h, t, d)`` keys/values of ``layer`` after the cached ones.

        Returns all keys/values so far, ``(B, h, length + t, d)``. Call
        ``advance(t)`` once every layer has been updated for this step.
        """
        end = self.length + k.size(2)
        if end > self.capacity:
            self._grow(end)
        self.self_k[layer, :, :, self.length : end] = k
        self.self_v[layer, :, :, self.length : end] = v
        return self.self_k[layer, :, :, :end], self.self_v[layer, :, :, :end]

    def advance(self, steps: int = 1) -> None:
        self.length += steps

    def reorder(self, indices: Tensor) -> KVCache:
        """Keep batch rows ``indices`` ``(B',)`` (in that order), in place; returns self."""
        self.self_k = self.self_k.index_select(1, indices)
        self.self_v = self.self_v.index_select(1, indices)
        if self.cross_k is not None and self.cross_v is not None:
            self.cross_k = self.cross_k.index_select(1, indices)
            self.cross_v = self.cross_v.index_select(1, indices)
        return self

    def _grow(self, needed: int) -> None:
        # Doubling keeps the amortised cost of appends constant.
        new_capacity = max(needed, 2 * self.capacity)
        pad = new_capacity - self.capacity
        widen = (0, 0, 0, pad)  # pad dim 3 (time) at the end
        self.self_k = torch.nn.functional.pad(self.self_k, widen)
        self.self_v = torch.nn.functional.pad(self.self_v, widen)
