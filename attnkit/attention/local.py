"""Local (sliding-window) and block-sparse attention: a band plus a few global tokens.

The patterns (a band of ``window`` keys around each query, plus global tokens;
queries are the *last* ``Tq`` of the ``Tk`` keys, as with a KV cache) and their
dense masks are ``attnkit.attention.local_masks``, re-exported here.

Two ways to compute it:

* ``impl="dense"``: build the ``(Tq, Tk)`` mask and call ``attend`` (SDPA or the
  explicit path when weights are asked for): ``O(T^2)`` memory; for short inputs
  and inspection.
* ``impl="chunked"``: queries in blocks of ``c``, each against its own key
  window plus the global keys (``attnkit.attention.local_kernels``): memory
  ``O(B h T (c + w + g))``.

FlexAttention (``create_block_mask`` + ``flex_attention``) was measured on this
CPU with torch 2.13 (``bench/NOTES.md``): eager it materialises the full score
matrix (and warns), compiled it runs forward fast, but it has **no backward on
CPU** (``NotImplementedError``), so it cannot train here. ``impl="flex"`` is
kept for GPUs and CPU inference; ``"auto"`` picks chunked for long inputs.

Shapes: ``B`` batch, ``h`` heads, ``Tq``/``Tk`` lengths, ``d`` head dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.attention.functional import attend
from attnkit.attention.local_kernels import chunked_local, flex_local
from attnkit.attention.local_masks import (
    GlobalTokens,
    band_mask,
    block_sparse_mask,
    global_positions,
    sliding_window_mask,
    window_extent,
)

__all__ = [
    "IMPLS",
    "GlobalTokens",
    "LocalWindow",
    "band_mask",
    "block_sparse_mask",
    "global_positions",
    "local_attention",
    "sliding_window_mask",
    "window_extent",
]

IMPLS = ("auto", "dense", "chunked", "flex")


def _real_keys(key_padding_mask: Tensor | None, b: int, tk: int) -> Tensor | None:
    """``(B, Tk)`` or ``(B, 1, 1, Tk)`` -> ``(B, Tk)`` bool, True = real key."""
    if key_padding_mask is None:
        return None
    m = key_padding_mask
    if m.dim() == 4 and m.shape[1:3] == (1, 1):
        m = m[:, 0, 0]
    if m.dtype != torch.bool or m.dim() != 2 or m.size(-1) != tk or m.size(0) not in (1, b):
        raise ValueError(
            f"key_padding_mask: expected bool (B, Tk) or (B, 1, 1, Tk) with Tk={tk}, "
            f"got {m.dtype} {tuple(key_padding_mask.shape)}"
        )
    return m


def local_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int,
    causal: bool = False,
    global_tokens: GlobalTokens = None,
    key_padding_mask: Tensor | None = None,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
    impl: str = "auto",
    block_size: int = 64,
) -> tuple[Tensor, Tensor | None]:
    """Scaled dot-product attention restricted to ``block_sparse_mask``.

    Args:
        q: ``(B, h, Tq, d)``; k: ``(B, h, Tk, d)``; v: ``(B, h, Tk, dv)``.
        window: keys in the sliding window (``window_extent``).
        causal: queries see no later key (aligned to the last ``Tq`` keys).
        global_tokens: ``n`` or key positions that attend/are attended globally.
        key_padding_mask: bool ``(B, Tk)`` or ``(B, 1, 1, Tk)``, True = real key.
        mask: any other bool mask broadcastable to ``(B, h, Tq, Tk)`` (True = may
            attend), combined with the pattern; it forces ``"dense"``.
        need_weights: return the dense weights ``(B, h, Tq, Tk)`` (forces ``"dense"``).
        impl: ``"auto"``, ``"dense"``, ``"chunked"`` or ``"flex"`` (module docstring).
        block_size: query block ``c`` of the chunked path (64 and 128 timed
            alike on this CPU for window 256; 64 keeps less memory).

    Returns:
        ``(out (B, h, Tq, dv), weights or None)``. A query with no real key in
        reach returns zeros, never NaN.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl: expected one of {', '.join(IMPLS)}; got {impl!r}")
    if block_size < 1:
        raise ValueError(f"block_size: must be >= 1, got {block_size}")
    b, _, tq, _ = q.shape
    tk = k.size(-2)
    left, right = window_extent(window, causal)
    real = _real_keys(key_padding_mask, b, tk)
    if impl == "auto":
        # The chunked path pays for c + left + right keys per query and for the
        # unfold copies; below ~4x that many keys a dense masked SDPA is cheaper
        # (bench/NOTES.md). Weights need the dense matrix anyway.
        sparse = tk > 4 * (block_size + left + right)
        impl = "chunked" if (sparse and not need_weights and mask is None) else "dense"
    if need_weights and impl != "dense":
        raise ValueError(f"need_weights: only impl='dense' returns weights, not {impl!r}")
    if mask is not None and impl != "dense":
        raise ValueError(f"mask: only impl='dense' takes a general mask, not {impl!r}")
    if impl == "dense":
        dense = block_sparse_mask(
            tq, tk, window=window, global_tokens=global_tokens, causal=causal, device=q.device
        )
        if real is not None:
            dense = dense & real[:, None, None, :]
        if mask is not None:
            dense = dense & mask
        return attend(
            q, k, v, mask=dense, dropout_p=dropout_p, need_weights=need_weights, scale=scale
        )
    g = global_positions(global_tokens, tk, q.device)
    if impl == "flex":
        return flex_local(q, k, v, left, right, g, real, causal, scale), None
    return chunked_local(q, k, v, left, right, g, real, causal, dropout_p, scale, block_size), None


@dataclass(frozen=True)
class LocalWindow:
    """A self-attention layer's reach: ``window`` keys around each query plus
    ``global_tokens`` global positions (the first ``n``); what a local layer is built with.

    ``mask`` gives the band at any query positions (a cached step); ``attend``
    runs a whole sequence through ``local_attention``, which never builds the
    ``(T, T)`` mask when the sequence is long and nothing else shapes the
    scores.
    """

    window: int
    global_tokens: int = 0
    causal: bool = False

    def __post_init__(self) -> None:
        window_extent(self.window, self.causal)  # validates the window
        if self.global_tokens < 0:
            raise ValueError(f"global_tokens: must be >= 0, got {self.global_tokens}")

    def _globals(self, num_keys: int) -> int | None:
        # The first n positions, of those that exist so far (a short sequence, a first step).
        return min(self.global_tokens, num_keys) or None

    def mask(self, q_positions: Tensor, num_keys: int) -> Tensor:
        """``(Tq, Tk)`` bool for queries at ``q_positions`` ``(Tq,)`` over keys ``0 .. Tk - 1``."""
        return block_sparse_mask(
            q_positions.numel(), num_keys, window=self.window, causal=self.causal,
            global_tokens=self._globals(num_keys), q_positions=q_positions,
        )  # fmt: skip

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        mask: Tensor | None,
        is_causal: bool,
        dropout_p: float,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """Local attention over a whole sequence: ``q`` ``(B, h, T, d)``, ``k``/``v`` the
        same ``T`` positions. ``mask``: a key padding mask ``(B, 1, 1, T)`` (the chunked
        path takes it), or any other bool mask (dense)."""
        padding = mask is not None and mask.dim() == 4 and mask.size(-2) == 1
        return local_attention(
            q, k, v, window=self.window, causal=self.causal or is_causal,
            global_tokens=self._globals(k.size(-2)), dropout_p=dropout_p,
            key_padding_mask=mask if padding else None, mask=None if padding else mask,
            need_weights=need_weights,
        )  # fmt: skip
