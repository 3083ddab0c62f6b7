"""What a Transformer decoder carries between decoding steps, and how its cache is made.

``DecoderState`` serves both cached families: the encoder-decoder (a source
mask, cross-attention keys/values in the cache) and the decoder-only LM (a
prompt token still to be fed). Its ``reorder`` follows beams.

A model's ``start`` builds its cache through a ``CacheFactory``: the default
makes the growing ``KVCache`` (the reference path); the static-cache wrapper
in ``attnkit.decoding.static`` passes one that makes a ``StaticKVCache``.
The model does not know which it got: both implement ``DecoderCache``.

Shapes: ``B`` batch rows, ``S`` source length, ``L`` layers, ``h`` key/value
heads, ``d`` head dim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from attnkit.attention.cache import DecoderCache, KVCache, RewindableCache
from attnkit.attention.masks import PreparedMask
from attnkit.attention.recurrent_cache import RecurrentStateCache

# Growing caches start this deep when the search gives no length bound, then double.
INITIAL_CAPACITY = 64


@dataclass(frozen=True)
class CacheLayout:
    """The shape of a model's decoder cache.

    Attributes:
        num_layers: decoder layers ``L``.
        num_heads: key/value heads per layer ``h``.
        head_dim: ``d``.
        max_positions: the most target positions the model can hold (``max_len``).
    """

    num_layers: int
    num_heads: int
    head_dim: int
    max_positions: int


class CacheFactory(Protocol):
    """Makes an empty cache for ``batch_size`` rows and (at least) ``positions`` positions."""

    def __call__(
        self,
        layout: CacheLayout,
        *,
        batch_size: int,
        positions: int,
        dtype: torch.dtype,
        device: torch.device,
        cross: tuple[Tensor, Tensor] | None = None,
    ) -> DecoderCache: ...


def growing_cache(
    layout: CacheLayout,
    *,
    batch_size: int,
    positions: int,
    dtype: torch.dtype,
    device: torch.device,
    cross: tuple[Tensor, Tensor] | None = None,
) -> KVCache:
    """The reference path's ``KVCache``: ``positions`` deep to start with, then it grows."""
    cache = KVCache(
        layout.num_layers,
        batch_size,
        layout.num_heads,
        layout.head_dim,
        capacity=positions,
        dtype=dtype,
        device=device,
    )
    if cross is not None:
        cache.set_cross(*cross)
    return cache


def recurrent_cache(
    layout: CacheLayout,
    *,
    batch_size: int,
    positions: int,
    dtype: torch.dtype,
    device: torch.device,
    cross: tuple[Tensor, Tensor] | None = None,
) -> RecurrentStateCache:
    """Linear attention's cache: one fixed-size state per layer, whatever the length."""
    cache = RecurrentStateCache(layout.num_layers, device=device)
    if cross is not None:
        cache.set_cross(*cross)
    return cache


def default_cache(config: object) -> CacheFactory:
    """The reference cache of a config: linear attention keeps states, the rest keys/values."""
    return recurrent_cache if getattr(config, "attention", "dense") == "linear" else growing_cache


@dataclass
class DecoderState:
    """Decoding state of a Transformer decoder.

    Attributes:
        cache: every layer's keys/values (a ``DecoderCache``).
        memory_mask: ``(B_src, 1, 1, S)`` real source positions, prepared once
            with its additive form (``PreparedMask``), or ``None`` (a
            decoder-only model, or a source batch without padding).
        pending: ``(B,)`` the prompt's last token, fed by the first ``step``
            (decoder-only; the searches feed BOS there), or ``None``.
        group: batch rows per source-side row: 1, or ``K`` once beam search has
            copied each sentence into ``K`` beams. The source side (the
            cross-attention keys/values and ``memory_mask``) is then kept once
            per sentence, and cross-attention reads it for all ``K`` beams at
            once (``CrossAttention``).
    """

    cache: DecoderCache
    memory_mask: PreparedMask | None = None
    pending: Tensor | None = None
    group: int = 1

    def reorder(self, indices: Tensor, *, group_size: int | None = None) -> DecoderState:
        """Keep batch rows ``indices`` ``(B',)``, e.g. to follow beams.

        With ``group_size`` (beam search: rows in groups of that many beams,
        indices that never leave their group) the source side stays where it
        is: only self-attention K/V move. Copying each row ``K`` times in order
        (beam search's expansion) shares the source side among the copies;
        keeping whole groups (beam search dropping done sentences: each new
        group's rows come from one old group) keeps it shared, those groups'
        copies; any other reorder gives every row its own again.
        """
        if group_size is not None and self.group in (1, group_size):
            self.cache = self.cache.reorder(indices, cross=False)
        elif group_size is None and self.group == 1 and (copies := _copies(indices)) > 1:
            self.cache = self.cache.reorder(indices, cross=False)
            self.group = copies
        elif (groups := _whole_groups(indices, self.group)) is not None:
            self.cache = self.cache.reorder(indices, cross=groups)
            if self.memory_mask is not None:
                self.memory_mask = self.memory_mask.index_select(0, groups)
        else:
            source = indices // self.group  # each new row's source-side row
            self.cache = self.cache.reorder(indices, cross=source)
            if self.memory_mask is not None:
                self.memory_mask = self.memory_mask.index_select(0, source)
            self.group = 1
        if self.pending is not None:
            self.pending = self.pending.index_select(0, indices)
        return self

    @property
    def rewindable(self) -> bool:
        """Whether ``truncate`` works: a key/value cache can forget positions, linear
        attention's running state cannot."""
        return isinstance(self.cache, RewindableCache)

    def truncate(self, length: int) -> DecoderState:
        """Keep the first ``length`` cached target positions (a rejected draft's rollback)."""
        if not isinstance(self.cache, RewindableCache):
            raise ValueError(f"truncate: {type(self.cache).__name__} cannot be rolled back")
        self.cache.truncate(length)
        return self

    def take_input(self, tokens: Tensor) -> Tensor:
        """The tokens to feed now, ``(B, t)``: the pending prompt token first, else ``tokens``."""
        if self.pending is not None:
            tokens, self.pending = self.pending, None
        return tokens[:, None] if tokens.dim() == 1 else tokens


def _copies(indices: Tensor) -> int:
    """``K`` when ``indices`` is ``0 (K times), 1 (K times), ...`` (beam expansion), else 1."""
    n = indices.numel()
    rows = int(indices[-1]) + 1 if n else 0  # one host sync, once per search
    if rows == 0 or n % rows or n == rows:
        return 1
    copies = n // rows
    expected = torch.arange(rows, device=indices.device).repeat_interleave(copies)
    return copies if torch.equal(indices, expected) else 1


def _whole_groups(indices: Tensor, group: int) -> Tensor | None:
    """The old group ``(B' / group,)`` of each new group of ``group`` rows, when every
    new group's rows come from one old group (and ``group > 1``); else ``None``."""
    if group == 1 or indices.numel() % group:
        return None
    blocks = indices.view(-1, group) // group
    groups = blocks[:, 0]
    # One host sync; beam search drops sentences a few times per batch at most.
    return groups if bool((blocks == groups[:, None]).all()) else None
