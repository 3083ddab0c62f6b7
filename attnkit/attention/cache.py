"""Key/value caches for incremental decoding: one protocol, two implementations.

A decoder that generates one token at a time keeps every layer's keys and
values so that each step only computes the newest position. The protocol:

* ``DecoderCache``: the whole decoder's cache. ``layers()`` gives one
  ``LayerCache`` view per layer (handed to that layer, so no layer index is
  threaded through the model); ``position_offset()`` says where the new
  tokens sit; ``self_mask(t)`` which cached keys the new queries may see;
  ``advance(t)`` commits a step; ``reorder(indices)`` follows beams.
* ``LayerCache``: one layer's view. ``update(k, v)`` appends the new
  self-attention keys/values and returns all of them; ``cross`` holds the
  cross-attention keys/values, computed once from the encoder output
  (``None`` for decoder-only models).

``KVCache`` (here) grows as needed and is the reference path.
``StaticKVCache`` (``attnkit.attention.static_cache``) has a fixed capacity
and device-side positions, so every step has the same shapes (the fast path,
and what ``torch.compile`` needs).

Shapes: ``L`` layers, ``B`` batch rows (sentences x beams), ``h`` heads
(key/value heads), ``S`` source length, ``d`` head dim, ``C`` capacity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, Self, runtime_checkable

import torch
from torch import Tensor


@runtime_checkable
class LayerCache(Protocol):
    """One decoder layer's view of a ``DecoderCache``."""

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new ``(B, h, t, d)`` keys/values; return every visible key/value."""
        ...

    @property
    def cross(self) -> tuple[Tensor, Tensor] | None:
        """Cross-attention keys/values ``(B, h, S, d)`` each, or ``None``."""
        ...

    def query_positions(self, t: int) -> Tensor:
        """Positions ``(t,)`` (long, on the cache's device) of the ``t`` new queries;
        the cached keys sit at positions ``0, 1, ...`` (for rotary and ALiBi terms)."""
        ...


@runtime_checkable
class DecoderCache(Protocol):
    """Every layer's keys/values for incremental decoding (see the module doc)."""

    length: int  # target positions already cached, on the host

    def layers(self) -> Sequence[LayerCache]:
        """One view per layer, in layer order."""
        ...

    def position_offset(self) -> int | Tensor:
        """Position of the next token: an ``int``, or a ``(1,)`` device tensor."""
        ...

    def self_mask(self, t: int) -> Tensor | None:
        """``(1, 1, t, keys)`` bool for ``t`` new queries, or ``None`` when a causal
        mask aligned to the last keys is exact (the queries are the newest keys)."""
        ...

    def advance(self, steps: int = 1) -> None:
        """Commit ``steps`` positions once every layer has been updated."""
        ...

    def reorder(self, indices: Tensor, *, cross: bool | Tensor = True) -> Self:
        """Keep batch rows ``indices`` ``(B',)`` in that order.

        ``cross`` says what the cross-attention keys/values do: follow
        ``indices`` (``True``), stay as they are (``False``: rows that share
        their source), or keep their rows ``cross``.
        """
        ...


@runtime_checkable
class RewindableCache(Protocol):
    """A cache that can forget its newest positions (speculative decoding's rollback)."""

    length: int

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` target positions (``<= self.length``); later ones
        are overwritten by the next update."""
        ...


class LayeredCache(Protocol):
    """A cache that keeps every layer (``KVCache``, ``StaticKVCache``,
    ``RecurrentStateCache``): what its ``LayerView`` reads."""

    cross_k: Tensor | None  # (L, B, h, S, d) or None
    cross_v: Tensor | None

    @property
    def device(self) -> torch.device: ...

    def position_offset(self) -> int | Tensor: ...

    def update_layer(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store layer ``layer``'s new keys/values; return every visible key/value."""
        ...


def _check_truncate(length: int, current: int) -> None:
    if not 0 <= length <= current:
        raise ValueError(f"truncate: length must be in [0, {current}], got {length}")


def cross_rows(indices: Tensor, cross: bool | Tensor) -> Tensor | None:
    """The rows a ``reorder`` keeps of the cross-attention keys/values; ``None``: all, as is."""
    if isinstance(cross, Tensor):
        return cross
    return indices if cross else None


class LayerView:
    """One layer's view of a cache that stores every layer (``KVCache``, ``StaticKVCache``).

    The cache keeps its layers stacked (one ``reorder`` moves them all); the
    view is what the layer sees, so no layer index travels through the model.
    """

    def __init__(self, cache: LayeredCache, index: int) -> None:
        self._cache, self._index = cache, index

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self._cache.update_layer(self._index, k, v)

    @property
    def cross(self) -> tuple[Tensor, Tensor] | None:
        c = self._cache
        if c.cross_k is None or c.cross_v is None:
            return None
        return c.cross_k[self._index], c.cross_v[self._index]

    def query_positions(self, t: int) -> Tensor:
        offset = self._cache.position_offset()
        device = self._cache.device
        if isinstance(offset, Tensor):  # a static cache: stays on the device, no sync
            return offset + torch.arange(t, device=device)
        return torch.arange(offset, offset + t, device=device)


PARTIAL_FRACTION = 0.4
"""A reorder that changes at most this share of the rows moves only those rows,
in place (gathered into the spare, then copied back: 4 row copies per moved row);
more, and the whole batch is gathered into the spare (2 per row). Below half the
rows the partial copy moves fewer bytes; 0.4 leaves room for its two operators."""


class KVCache:
    """Keys and values of every decoder layer, stacked so that ``reorder`` is one
    ``index_select`` per tensor; the time axis doubles when it fills up.

    Self-attention keys/values are ``(L, B, h, C, d)``, filled ``length``
    positions deep; cross-attention keys/values ``(L, B, h, S, d)`` are set once.
    """

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
        shape = (num_layers, batch_size, num_heads, max(1, capacity), head_dim)
        self.self_k = torch.zeros(shape, dtype=dtype, device=device)
        self.self_v = torch.zeros(shape, dtype=dtype, device=device)
        self.cross_k: Tensor | None = None
        self.cross_v: Tensor | None = None
        self.length = 0
        # Reorders gather into these, then swap (no allocation per beam step).
        self._spare_k: Tensor | None = None
        self._spare_v: Tensor | None = None
        self._rows: Tensor | None = None  # arange(B), to find the rows a reorder moves

    @property
    def capacity(self) -> int:
        return self.self_k.size(3)

    @property
    def device(self) -> torch.device:
        return self.self_k.device

    def set_cross(self, k: Tensor, v: Tensor) -> None:
        """Store cross-attention keys/values ``(L, B, h, S, d)`` computed once."""
        self.cross_k, self.cross_v = k, v

    def layers(self) -> Sequence[LayerCache]:
        # Made per call, not stored: views kept on the cache would form a reference
        # cycle, and a pooled buffer is handed out again only once its cache is freed.
        return [LayerView(self, i) for i in range(len(self.self_k))]

    def position_offset(self) -> int:
        return self.length

    def self_mask(self, t: int) -> None:
        return None  # keys are exactly positions 0 .. length + t - 1

    def update_layer(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        end = self.length + k.size(2)
        if end > self.capacity:
            self._grow(end)
        self.self_k[layer, :, :, self.length : end] = k
        self.self_v[layer, :, :, self.length : end] = v
        return self.self_k[layer, :, :, :end], self.self_v[layer, :, :, :end]

    def advance(self, steps: int = 1) -> None:
        self.length += steps

    def truncate(self, length: int) -> None:
        # Keys/values past ``length`` stay in the buffer but are never read again:
        # every read is the ``[:length + t]`` prefix, and the next update overwrites them.
        _check_truncate(length, self.length)
        self.length = length

    def reorder(self, indices: Tensor, *, cross: bool | Tensor = True) -> Self:
        # Only the filled prefix moves, gathered in one pass into a spare buffer
        # that then takes the old one's place (a beam step allocates nothing).
        # When few rows change (beam search keeps each surviving beam's first
        # child in its parent's row), only those rows move, in place.
        n = self.length
        moved = self._moved_rows(indices)
        if moved is not None:
            if moved.numel():
                source = indices.index_select(0, moved)
                self._spare_k = self._copy_rows(self.self_k, self._spare_k, moved, source, n)
                self._spare_v = self._copy_rows(self.self_v, self._spare_v, moved, source, n)
        else:
            self.self_k, self._spare_k = self._gather(self.self_k, self._spare_k, indices, n)
            self.self_v, self._spare_v = self._gather(self.self_v, self._spare_v, indices, n)
        rows = cross_rows(indices, cross)
        if rows is not None and self.cross_k is not None and self.cross_v is not None:
            self.cross_k = self.cross_k.index_select(1, rows)
            self.cross_v = self.cross_v.index_select(1, rows)
        return self

    def _moved_rows(self, indices: Tensor) -> Tensor | None:
        """The rows a same-size reorder changes ``(m,)``, when moving only them is the
        cheaper (``m <= PARTIAL_FRACTION * B``, on the CPU); else ``None``."""
        rows = self.self_k.size(1)
        if (
            indices.numel() != rows
            or self.device.type != "cpu"  # the check below syncs with the host
            or (self.self_k.requires_grad and torch.is_grad_enabled())
        ):
            return None
        if self._rows is None or self._rows.numel() != rows:
            self._rows = torch.arange(rows, device=self.device)
        moved = (indices != self._rows).nonzero().squeeze(1)
        return moved if moved.numel() <= PARTIAL_FRACTION * rows else None

    @staticmethod
    def _copy_rows(
        buf: Tensor, spare: Tensor | None, moved: Tensor, source: Tensor, n: int
    ) -> Tensor:
        """Rows ``moved`` of ``buf`` := its rows ``source``, through ``spare`` (returned)."""
        if spare is None or spare.size(1) != buf.size(1):
            spare = torch.empty_like(buf)
        m = moved.numel()
        # Gathered out first: a source row may itself be overwritten (a general permutation).
        torch.index_select(buf[:, :, :, :n], 1, source, out=spare[:, :m, :, :n])
        buf[:, :, :, :n].index_copy_(1, moved, spare[:, :m, :, :n])
        return spare

    @staticmethod
    def _gather(
        buf: Tensor, spare: Tensor | None, indices: Tensor, n: int
    ) -> tuple[Tensor, Tensor | None]:
        """``(buf's rows indices, the next spare)``; positions ``>= n`` are left unset."""
        if buf.requires_grad and torch.is_grad_enabled():  # out= does not record autograd
            return buf.index_select(1, indices), None
        rows = indices.numel()
        if spare is None or spare.size(1) != rows:
            spare = buf.new_empty((buf.size(0), rows, *buf.shape[2:]))
        torch.index_select(buf[:, :, :, :n], 1, indices, out=spare[:, :, :, :n])
        return spare, buf if buf.size(1) == rows else None

    def _grow(self, needed: int) -> None:
        # Doubling keeps the amortised cost of appends constant.
        new_capacity = max(needed, 2 * self.capacity)
        widen = (0, 0, 0, new_capacity - self.capacity)  # pad dim 3 (time) at the end
        self.self_k = torch.nn.functional.pad(self.self_k, widen)
        self.self_v = torch.nn.functional.pad(self.self_v, widen)
        self._spare_k = self._spare_v = None
