"""The fast path's key/value cache: fixed capacity, positions on the device.

``StaticKVCache`` implements ``attnkit.attention.cache.DecoderCache`` with a
capacity fixed up front (the search's length bound). The step index is a
device tensor, keys/values are written in place at that index, and attention
runs over the whole capacity with a validity mask (``self_mask``). Every
decoding step then has identical shapes and addresses, which CUDA graphs
(``torch.compile(mode="reduce-overhead")``) need, and nothing in a step reads
a Python counter that changes.

``StaticBufferPool`` lets consecutive decodes of the same shape reuse the
same buffers (same addresses: a recorded CUDA graph replays instead of
re-recording).

Shapes: ``L`` layers, ``B`` batch rows, ``h`` key/value heads, ``S`` source
length, ``d`` head dim, ``C`` capacity (target positions).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Self

import torch
from torch import Tensor

from attnkit.attention.cache import LayerCache, LayerView, _check_truncate, cross_rows

PoolKey = tuple[str, tuple[int, ...], torch.dtype, torch.device, bool]
"""A pooled buffer's name, shape, dtype, device and whether it was made in inference mode."""


class StaticBufferPool:
    """Reuses static-cache buffers across decoding calls.

    A buffer is handed out again only once the cache that last took it is
    gone (a weak reference), so two live decodes never share one.
    ``max_entries`` bounds how many buffers are kept (oldest free ones go first).
    """

    def __init__(self, max_entries: int = 16, *, mark_static: bool = True) -> None:
        self.max_entries = max_entries
        self.mark_static = mark_static
        self._entries: OrderedDict[PoolKey, tuple[Tensor, weakref.ref[object]]] = OrderedDict()

    def take(
        self,
        owner: object,
        name: str,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device | str,
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
    ``pos`` ``(1,)`` long holds the same count on the device. ``reorder`` is
    exact (``index_select``), in place when the batch size is unchanged and
    the cache is pooled, so the addresses stay put.
    """

    def __init__(
        self,
        self_k: list[Tensor],
        self_v: list[Tensor],
        cross_k: Tensor | None,
        cross_v: Tensor | None,
        pos: Tensor,
        *,
        length: int = 0,
        pool: StaticBufferPool | None = None,
    ) -> None:
        self.self_k, self.self_v = self_k, self_v  # L x (B, h, C, d)
        self.cross_k, self.cross_v = cross_k, cross_v  # (L, B, h, S, d) or None
        self.pos = pos  # (1,) long, on the device
        self.length = length  # the same count, on the host
        self.pool = pool

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
        cross_k: Tensor | None = None,
        cross_v: Tensor | None = None,
        pool: StaticBufferPool | None = None,
    ) -> StaticKVCache:
        """An empty cache of ``capacity`` positions (around cross K/V ``(L, B, h, S, d)``)."""
        if capacity < 1:
            raise ValueError(f"capacity: must be >= 1, got {capacity}")
        shape = (batch_size, num_heads, capacity, head_dim)
        cache = cls([], [], None, None, torch.zeros(1, dtype=torch.long, device=device))
        cache.pool = pool

        def buffer(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
            if pool is None:
                return torch.zeros(shape, dtype=dtype, device=device)
            return pool.take(cache, name, shape, dtype, device)

        cache.self_k = [buffer(f"self_k{i}", shape, dtype) for i in range(num_layers)]
        cache.self_v = [buffer(f"self_v{i}", shape, dtype) for i in range(num_layers)]
        if cross_k is not None and cross_v is not None:
            if pool is None:  # nothing needs fixed addresses: keep the tensors given
                cache.cross_k, cache.cross_v = cross_k, cross_v
            else:
                cache.cross_k = buffer("cross_k", tuple(cross_k.shape), dtype).copy_(cross_k)
                cache.cross_v = buffer("cross_v", tuple(cross_v.shape), dtype).copy_(cross_v)
        cache.pos = buffer("pos", (1,), torch.long)
        return cache

    @property
    def capacity(self) -> int:
        return self.self_k[0].size(2)

    @property
    def device(self) -> torch.device:
        return self.pos.device

    def layers(self) -> Sequence[LayerCache]:
        # Made per call, not stored: views kept on the cache would form a reference
        # cycle, and a pooled buffer is handed out again only once its cache is freed.
        return [LayerView(self, i) for i in range(len(self.self_k))]

    def position_offset(self) -> Tensor:
        return self.pos

    def positions(self, t: int = 1) -> Tensor:
        """Target positions ``(t,)`` of the next ``t`` tokens: ``pos .. pos + t - 1``."""
        return self.pos + torch.arange(t, device=self.pos.device)

    def self_mask(self, t: int = 1) -> Tensor:
        """``(1, 1, t, C)`` bool, True = may attend: query ``i`` sees keys ``<= pos + i``."""
        keys = torch.arange(self.capacity, device=self.pos.device)
        return (keys[None, :] <= self.positions(t)[:, None])[None, None]

    def update_layer(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``(B, h, t, d)`` at ``pos`` in place; return the layer's whole buffers
        (positions past ``pos + t`` hold stale values that ``self_mask`` hides)."""
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

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions; the rest is hidden by ``self_mask``."""
        _check_truncate(length, self.length)
        self.pos.fill_(length)  # in place: the address stays (CUDA graphs)
        self.length = length

    def reorder(self, indices: Tensor, *, cross: bool | Tensor = True) -> Self:
        """Keep batch rows ``indices`` ``(B',)`` (in that order); returns self.

        A pooled cache keeps its buffers (``copy_``) when ``B' == B``, so a
        recorded CUDA graph stays valid; a batch-size change (beam search's
        first expansion) takes new buffers from the pool.
        """
        n = self.length  # only the filled positions move: the rest are masked, never read
        for name in ("self_k", "self_v"):
            buffers = getattr(self, name)
            for i, old in enumerate(buffers):
                picked = old[:, :, :n].index_select(0, indices)
                buffers[i] = self._moved_prefix(f"{name}{i}", old, picked)
        rows = cross_rows(indices, cross)
        if rows is not None and self.cross_k is not None and self.cross_v is not None:
            self.cross_k = self._moved("cross_k", self.cross_k, self.cross_k.index_select(1, rows))
            self.cross_v = self._moved("cross_v", self.cross_v, self.cross_v.index_select(1, rows))
        return self

    def _moved_prefix(self, name: str, old: Tensor, picked: Tensor) -> Tensor:
        """Where the reordered first ``n`` positions ``picked`` ``(B', h, n, d)`` of ``old``
        ``(B, h, C, d)`` live from now on: a pooled cache's ``old`` itself when the batch
        size stays (the address too), else a zeroed buffer (pooled, or new) of ``B'``
        rows. Beam search reorders every step; moving the filled prefix, not the capacity,
        keeps a beam step's cache traffic to the growing cache's."""
        n = picked.size(2)
        if self.pool is not None and picked.size(0) == old.size(0):
            old[:, :, :n].copy_(picked)
            return old
        shape = (picked.size(0), *old.shape[1:])
        if self.pool is None:
            fresh = torch.zeros(shape, dtype=old.dtype, device=old.device)
        else:
            fresh = self.pool.take(self, name, shape, old.dtype, old.device)
        fresh[:, :, :n].copy_(picked)
        return fresh

    def _moved(self, name: str, old: Tensor, picked: Tensor) -> Tensor:
        """Where ``picked`` (the reordered ``old``) lives from now on."""
        if self.pool is None:
            return picked
        if picked.shape == old.shape:
            return old.copy_(picked)  # same address: a recorded CUDA graph stays valid
        shape = tuple(picked.shape)
        return self.pool.take(self, name, shape, picked.dtype, picked.device).copy_(picked)
