"""The decoding cache of linear attention: a fixed-size state per layer, not keys and values.

Causal linear attention (``attnkit.attention.linear``) is an RNN (Katharopoulos
et al., 2020, §3.4): after any prefix, each layer needs only ``S`` ``(B, h, d, d)``
and ``z`` ``(B, h, d)``, whatever the length. ``RecurrentStateCache``
implements ``DecoderCache`` around those states, so the searches, beam
reordering and the stepping protocol work unchanged; cross-attention keys and
values (an encoder-decoder's, softmax attention) are held as in ``KVCache``.

Shapes: ``L`` layers, ``B`` batch rows, ``h`` heads, ``d`` head dim, ``S`` source length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

import torch
from torch import Tensor

from attnkit.attention.cache import LayerCache, LayerView, cross_rows
from attnkit.attention.linear import LinearAttentionState


class RecurrentLayerView(LayerView):
    """One layer's view: its ``state`` (read and replaced by ``LinearSelfAttention``);
    cross-attention keys/values and query positions as ``LayerView`` has them."""

    def __init__(self, cache: RecurrentStateCache, index: int) -> None:
        super().__init__(cache, index)
        self._recurrent = cache  # typed: LayerView only knows a LayeredCache

    @property
    def state(self) -> LinearAttentionState | None:
        return self._recurrent.states[self._index]

    @state.setter
    def state(self, value: LinearAttentionState) -> None:
        self._recurrent.states[self._index] = value


class RecurrentStateCache:
    """Every layer's linear-attention state (``None`` until the first token)."""

    def __init__(self, num_layers: int, *, device: torch.device | str | None = None) -> None:
        self.states: list[LinearAttentionState | None] = [None] * num_layers
        self.cross_k: Tensor | None = None
        self.cross_v: Tensor | None = None
        self.length = 0
        self.device = torch.device("cpu") if device is None else torch.device(device)

    def update_layer(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        raise TypeError("update: a linear-attention layer keeps a state, not keys and values")

    def set_cross(self, k: Tensor, v: Tensor) -> None:
        """Store cross-attention keys/values ``(L, B, h, S, d)`` computed once."""
        self.cross_k, self.cross_v = k, v

    def layers(self) -> Sequence[LayerCache]:
        return [RecurrentLayerView(self, i) for i in range(len(self.states))]

    def position_offset(self) -> int:
        return self.length

    def self_mask(self, t: int) -> None:
        return None

    def advance(self, steps: int = 1) -> None:
        self.length += steps

    def reorder(self, indices: Tensor, *, cross: bool | Tensor = True) -> Self:
        self.states = [None if s is None else s.reorder(indices) for s in self.states]
        rows = cross_rows(indices, cross)
        if rows is not None and self.cross_k is not None and self.cross_v is not None:
            self.cross_k = self.cross_k.index_select(1, rows)
            self.cross_v = self.cross_v.index_select(1, rows)
        return self
