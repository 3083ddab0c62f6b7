"""An explicit key/value cache for incremental decoding.

One object holds every layer's keys and values, stacked so that beam search
reorders the whole cache with one ``index_select`` per tensor:

* self-attention keys/values ``(L, B, h, capacity, d)``, preallocated and
  filled one step at a time (``update`` then ``advance``);
* cross-attention keys/values ``(L, B, h, S, d)``, computed once from the
  encoder output and never recomputed.

``StaticKVCache`` is the fast path's variant: its capacity is fixed up front
(the search's length bound), the step index is a device tensor, keys/values
are written in place at that index, and attention runs over the whole
capacity with a validity mask. Every decoding step then has identical shapes
and addresses, which CUDA graphs (``torch.compile(mode="reduce-overhead")``)
need, and nothing in a step reads a Python counter that changes.

Shapes: ``L`` layers, ``B`` batch rows (sentences x beams), ``h`` heads,
``S`` source length, ``d`` head dim, ``C`` capacity (target positions).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any

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


# -- the static cache of the fast decoding path ---------------------------------------


class StaticBufferPool:
    """Reuses a model's static-cache buffers across decoding calls.

    CUDA graphs replay on fixed addresses: a decode step recorded for one
    batch's buffers is replayed, not re-recorded, on the next batch of the
    same shape only if that batch gets the same buffers. A buffer is handed
    out again only once the cache that last took it is gone (a weak
    reference), so two live decodes never share one. ``max_entries`` bounds
    how many buffers are kept (oldest free ones are dropped first).
    """

    def __init__(self, max_entries: int = 16, *, mark_static: bool = True) -> None:
        self.max_entries = max_entries
        self.mark_static = mark_static
        self._entries: OrderedDict[tuple, tuple[Tensor, Any]] = OrderedDict()

    def take(
        self, owner: object, name: str, shape: tuple[int, ...], dtype: torch.dtype, device
    ) -> Tensor:
        """A zeroed ``shape`` buffer for ``owner``: a free pooled one, else a new one."""
        key = (name, tuple(shape), dtype, torch.device(device), torch.is_inference_mode_enabled())
        entry = self._entries.get(key)
        if entry is not None and entry[1]() is None:  # its last owner is gone
            buf = entry[0].zero_()
            self._entries[key] = (buf, weakref.ref(owner))
            self._entries.move_to_end(key)
            return buf
        buf = torch.zeros(shape, dtype=dtype, device=device)
        if self.mark_static:
            # The address stays the same across calls: CUDA graphs need no
            # copy of it per replay, and may mutate it in place (the cache).
            torch._dynamo.mark_static_address(buf)
        if entry is None:  # a busy entry stays with its owner; this one is not pooled
            self._entries[key] = (buf, weakref.ref(owner))
            self._evict()
        return buf

    def _evict(self) -> None:
        free = [k for k, (_, ref) in self._entries.items() if ref() is None]
        for key in free[: max(0, len(self._entries) - self.max_entries)]:
            del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


class StaticKVCache:
    """Fixed-capacity keys/values; every step has the same shapes (see the module doc).

    Self-attention keys/values are one ``(B, h, C, d)`` tensor per layer, not
    one stacked tensor: ``torch.compile`` turns an in-place write into a
    separate graph input into an in-place scatter, while a write into a view
    of a stacked input costs a copy of the whole buffer per step.

    ``length`` counts the cached positions on the host (no device sync);
    ``pos`` ``(1,)`` long holds the same count on the device, for the step
    function. ``update`` writes at ``pos`` in place and returns the layer's
    whole buffers; ``self_mask(t)`` says which positions a query may see.
    ``reorder`` is exact (``index_select``), in place when the batch size is
    unchanged and the cache is pooled, so the addresses stay put.
    """

    def __init__(
        self,
        self_k: list[Tensor],
        self_v: list[Tensor],
        cross_k: Tensor,
        cross_v: Tensor,
        pos: Tensor,
        *,
        length: int = 0,
        pool: StaticBufferPool | None = None,
    ) -> None:
        self.self_k, self.self_v = self_k, self_v  # L x (B, h, C, d)
        self.cross_k, self.cross_v = cross_k, cross_v  # (L, B, h, S, d)
        self.pos = pos  # (1,) long, on the device
        self.length = length  # the same count, on the host
        self.pool = pool

    @classmethod
    def allocate(
        cls,
        num_layers: int,
        num_heads: int,
        head_dim: int,
        *,
        capacity: int,
        cross_k: Tensor,
        cross_v: Tensor,
        pool: StaticBufferPool | None = None,
    ) -> StaticKVCache:
        """An empty cache of ``capacity`` positions around cross K/V ``(L, B, h, S, d)``."""
        if capacity < 1:
            raise ValueError(f"capacity: must be >= 1, got {capacity}")
        batch, dtype, device = cross_k.size(1), cross_k.dtype, cross_k.device
        shape = (batch, num_heads, capacity, head_dim)
        cache = cls.__new__(cls)
        cache.pool, cache.length = pool, 0
        if pool is None:
            cache.self_k = [
                torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)
            ]
            cache.self_v = [
                torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)
            ]
            cache.cross_k, cache.cross_v = cross_k, cross_v
            cache.pos = torch.zeros(1, dtype=torch.long, device=device)
        else:
            cache.self_k = [
                pool.take(cache, f"self_k{i}", shape, dtype, device) for i in range(num_layers)
            ]
            cache.self_v = [
                pool.take(cache, f"self_v{i}", shape, dtype, device) for i in range(num_layers)
            ]
            cache.cross_k = pool.take(cache, "cross_k", cross_k.shape, dtype, device)
            cache.cross_v = pool.take(cache, "cross_v", cross_v.shape, dtype, device)
            cache.cross_k.copy_(cross_k)
            cache.cross_v.copy_(cross_v)
            cache.pos = pool.take(cache, "pos", (1,), torch.long, device)
        return cache

    @property
    def capacity(self) -> int:
        return self.self_k[0].size(2)

    def positions(self, t: int = 1) -> Tensor:
        """Target positions ``(t,)`` of the next ``t`` tokens: ``pos .. pos + t - 1``."""
        return self.pos + torch.arange(t, device=self.pos.device)

    def self_mask(self, t: int = 1) -> Tensor:
        """``(1, 1, t, C)`` bool, True = may attend: query ``i`` sees keys ``<= pos + i``."""
        keys = torch.arange(self.capacity, device=self.pos.device)
        return (keys[None, :] <= self.positions(t)[:, None])[None, None]

    def cross(self, layer: int) -> tuple[Tensor, Tensor]:
        """Cross-attention keys/values of one layer, ``(B, h, S, d)`` each."""
        return self.cross_k[layer], self.cross_v[layer]

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write the new ``(B, h, t, d)`` keys/values of ``layer`` at ``pos`` (in place).

        Returns the layer's whole ``(B, h, C, d)`` buffers; positions past
        ``pos + t`` hold stale values that ``self_mask`` hides. Call
        ``advance(t)`` once every layer has been updated.
        """
        index = self.positions(k.size(2))
        self.self_k[layer].index_copy_(2, index, k)
        self.self_v[layer].index_copy_(2, index, v)
        return self.self_k[layer], self.self_v[layer]

    def check_room(self, steps: int) -> None:
        """Raise before ``steps`` more positions would overflow the capacity (host-side)."""
        if self.length + steps > self.capacity:
            raise ValueError(
                f"capacity: the static cache holds {self.capacity} target positions; "
                f"{self.length} are used and {steps} more were fed"
            )

    def advance(self, steps: int = 1) -> None:
        self.pos.add_(steps)  # on the device, no sync
        self.length += steps

    def reorder(self, indices: Tensor, *, cross: bool = True) -> StaticKVCache:
        """Keep batch rows ``indices`` ``(B',)`` (in that order); returns self.

        A pooled cache keeps its buffers (``copy_``) when ``B' == B``, so a
        recorded CUDA graph stays valid; a batch-size change (beam search's
        first expansion) takes new buffers from the pool. ``cross=False``
        leaves the cross-attention K/V as they are: for a caller that knows
        the rows it merges hold the same source (beams of one sentence).
        """
        if not cross and indices.numel() != self.cross_k.size(1):
            raise ValueError("reorder: cross=False needs the batch size to stay the same")
        for name in ("self_k", "self_v"):
            buffers = getattr(self, name)
            for i, old in enumerate(buffers):
                buffers[i] = self._moved(f"{name}{i}", old, old.index_select(0, indices))
        if cross:
            self.cross_k = self._moved(
                "cross_k", self.cross_k, self.cross_k.index_select(1, indices)
            )
            self.cross_v = self._moved(
                "cross_v", self.cross_v, self.cross_v.index_select(1, indices)
            )
        return self

    def _moved(self, name: str, old: Tensor, picked: Tensor) -> Tensor:
        """Where ``picked`` (the reordered ``old``) lives from now on."""
        if self.pool is None:
            return picked
        if picked.shape == old.shape:
            return old.copy_(picked)  # same address: a recorded CUDA graph stays valid
        return self.pool.take(self, name, tuple(picked.shape), picked.dtype, picked.device).copy_(
            picked
        )
