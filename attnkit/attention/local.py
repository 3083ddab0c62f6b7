"""Local (sliding-window) and block-sparse attention: a band plus a few global tokens.

Patterns (True = may attend; queries are the *last* ``Tq`` of the ``Tk`` key
positions, so query ``i`` sits at position ``p = Tk - Tq + i``, as with a KV cache):

* band: key ``j`` with ``p - left <= j <= p + right``;
* sliding window of ``window`` keys: causal ``left = window - 1, right = 0``
  (the query and the ``window - 1`` keys before it, as Mistral's
  ``sliding_window``); bidirectional ``left = right = window // 2`` (Longformer,
  Beltagy et al. 2020, §3.1: "1/2 w tokens on each side");
* global tokens (Longformer §3.1; BigBird's ITC, Zaheer et al. 2020, §2): a
  global position attends to every key and every query attends to it; with
  ``causal`` both still respect causality (nobody sees the future).

Two ways to compute it:

* ``impl="dense"``: build the ``(Tq, Tk)`` mask and call ``attend`` (SDPA or the
  explicit path when weights are asked for): ``O(T^2)`` memory; for short inputs
  and inspection.
* ``impl="chunked"``: queries in blocks of ``c``; each block meets only its key
  window of ``c + left + right`` keys (an ``unfold`` view of the padded keys),
  plus the ``g`` global keys; one batched SDPA call for all blocks. Scores and
  mask take ``O(B h T (c + w + g))`` memory; the ``g`` global query rows are
  one dense ``(g, Tk)`` call on top.

FlexAttention (``create_block_mask`` + ``flex_attention``) was measured on this
CPU with torch 2.13 (``bench/NOTES.md``): eager it materialises the full score
matrix (and warns), compiled it runs forward fast, but it has **no backward on
CPU** (``NotImplementedError``), so it cannot train here. ``impl="flex"`` is
kept for GPUs and CPU inference; ``"auto"`` picks chunked for long inputs.

Shapes: ``B`` batch, ``h`` heads, ``Tq``/``Tk`` lengths, ``d`` head dim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.attention.functional import attend

GlobalTokens = int | Sequence[int] | Tensor | None
"""``n`` (the first ``n`` positions), explicit key positions, or ``None``."""

IMPLS = ("auto", "dense", "chunked", "flex")


def window_extent(window: int, causal: bool) -> tuple[int, int]:
    """``(left, right)`` keys either side of a query for a window of ``window``."""
    if window < 1:
        raise ValueError(f"window: must be >= 1, got {window}")
    return (window - 1, 0) if causal else (window // 2, window // 2)


def _positions(
    num_queries: int,
    num_keys: int | None,
    device: torch.device | None,
    q_positions: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Query positions ``(Tq, 1)`` (given, else the last ``Tq`` keys) and keys ``(1, Tk)``."""
    num_keys = num_queries if num_keys is None else num_keys
    if q_positions is not None:
        if q_positions.shape != (num_queries,):
            raise ValueError(
                f"q_positions: expected ({num_queries},), got {tuple(q_positions.shape)}"
            )
        return q_positions[:, None], torch.arange(num_keys, device=q_positions.device)[None, :]
    if num_keys < num_queries:
        raise ValueError(f"num_keys: {num_keys} is fewer than the {num_queries} queries")
    qpos = torch.arange(num_keys - num_queries, num_keys, device=device)
    return qpos[:, None], torch.arange(num_keys, device=device)[None, :]


def band_mask(
    num_queries: int,
    num_keys: int | None = None,
    *,
    left: int,
    right: int,
    device: torch.device | None = None,
) -> Tensor:
    """``(Tq, Tk)``: True where ``p - left <= j <= p + right`` (``p`` the query's position)."""
    if left < 0 or right < 0:
        raise ValueError(f"left/right: must be >= 0, got left={left}, right={right}")
    return _band(*_positions(num_queries, num_keys, device), left, right)


def _band(qpos: Tensor, kpos: Tensor, left: int, right: int) -> Tensor:
    """The one band test: key ``j`` within ``[p - left, p + right]`` of query position ``p``."""
    rel = kpos - qpos
    return (rel >= -left) & (rel <= right)


def sliding_window_mask(
    num_queries: int,
    num_keys: int | None = None,
    *,
    window: int,
    causal: bool = False,
    device: torch.device | None = None,
) -> Tensor:
    """``(Tq, Tk)`` sliding-window mask; see ``window_extent`` for what ``window`` counts."""
    left, right = window_extent(window, causal)
    return band_mask(num_queries, num_keys, left=left, right=right, device=device)


def global_positions(
    global_tokens: GlobalTokens, num_keys: int, device: torch.device | None = None
) -> Tensor:
    """Sorted unique global key positions ``(g,)`` (long); errors name ``global_tokens``."""
    if global_tokens is None:
        return torch.zeros(0, dtype=torch.long, device=device)
    if isinstance(global_tokens, int):
        if not 0 <= global_tokens <= num_keys:
            raise ValueError(f"global_tokens: {global_tokens} is not in 0..{num_keys}")
        return torch.arange(global_tokens, device=device)
    pos: Tensor = torch.unique(torch.as_tensor(global_tokens, dtype=torch.long, device=device))
    if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= num_keys):
        raise ValueError(f"global_tokens: positions must be in 0..{num_keys - 1}, got {pos}")
    return pos


def block_sparse_mask(
    num_queries: int,
    num_keys: int | None = None,
    *,
    window: int,
    global_tokens: GlobalTokens = None,
    causal: bool = False,
    q_positions: Tensor | None = None,
    device: torch.device | None = None,
) -> Tensor:
    """``(Tq, Tk)``: sliding window, plus global rows and columns, then causality.

    ``q_positions`` ``(Tq,)`` (long) places the queries anywhere among the keys
    (a static cache's step, whose keys are its whole capacity); by default they
    are the last ``Tq`` keys.
    """
    num_keys = num_queries if num_keys is None else num_keys
    qpos, kpos = _positions(num_queries, num_keys, device, q_positions)
    mask = _band(qpos, kpos, *window_extent(window, causal))
    g = global_positions(global_tokens, num_keys, kpos.device)
    if g.numel():
        is_global_key = torch.isin(kpos, g)  # (1, Tk): every query sees these keys
        is_global_query = torch.isin(qpos, g)  # (Tq, 1): these queries see every key
        mask = mask | is_global_key | is_global_query
        if causal:
            mask = mask & (kpos <= qpos)
    return mask


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
        return _flex(q, k, v, left, right, g, real, causal, scale), None
    return _chunked(q, k, v, left, right, g, real, causal, dropout_p, scale, block_size), None


def _chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    left: int,
    right: int,
    g: Tensor,
    real: Tensor | None,
    causal: bool,
    dropout_p: float,
    scale: float | None,
    c: int,
) -> Tensor:
    """Query blocks against their key windows; memory ``O(B h T (c + left + right + g))``."""
    b, h, tq, d = q.shape
    tk, off = k.size(-2), k.size(-2) - q.size(-2)
    nb = -(-tq // c)
    size = c + left + right
    back = nb * c - tq + right
    # Padded key index = position + left; block n's window starts at padded
    # index off + n c, i.e. at position off + n c - left (its first query's reach).
    kw = F.pad(k, (0, 0, left, back))[:, :, off:].unfold(2, size, c).transpose(-1, -2)
    vw = F.pad(v, (0, 0, left, back))[:, :, off:].unfold(2, size, c).transpose(-1, -2)
    qb = F.pad(q, (0, 0, 0, nb * c - tq)).view(b, h, nb, c, d)

    dev = q.device
    ii = torch.arange(c, device=dev)[:, None]
    jj = torch.arange(size, device=dev)[None, :]
    band = (jj >= ii) & (jj <= ii + left + right)  # (c, size), the same for every block
    start = off + torch.arange(nb, device=dev)[:, None, None] * c  # first query of each block
    kpos = start - left + jj  # (nb, 1, size)
    mask = band & (kpos >= 0) & (kpos < tk)  # (nb, c, size)
    mask = mask[None]  # (1 | B, nb, c, size)
    if real is not None:
        rw = F.pad(real, (left, back), value=False)[:, off:].unfold(1, size, c)  # (B, nb, size)
        mask = mask & rw[:, :, None, :]

    if g.numel():
        # Global keys join every block, except where the band already has them.
        qpos = start + ii  # (nb, c, 1)
        gpos = g[None, None, :]
        rel = gpos - qpos
        gmask = (rel < -left) | (rel > right)
        if causal:
            gmask = gmask & (rel <= 0)
        gmask = gmask[None]
        if real is not None:
            gmask = gmask & real[:, g][:, None, None, :]
        kg = k[:, :, g][:, :, None].expand(b, h, nb, g.numel(), d)
        vg = v[:, :, g][:, :, None].expand(b, h, nb, g.numel(), v.size(-1))
        kw, vw = torch.cat([kw, kg], dim=-2), torch.cat([vw, vg], dim=-2)
        rows_b = max(mask.size(0), gmask.size(0))
        mask = torch.cat(
            [mask.expand(rows_b, -1, -1, -1), gmask.expand(rows_b, -1, -1, -1)], dim=-1
        )

    has_key = mask.any(-1, keepdim=True)
    mask = mask | ~has_key  # no all-masked softmax row; those rows are zeroed below
    out = F.scaled_dot_product_attention(
        qb, kw, vw, attn_mask=mask[:, None], dropout_p=dropout_p, scale=scale
    )
    out = out.masked_fill(~has_key[:, None], 0.0).reshape(b, h, nb * c, -1)[:, :, :tq]

    rows = g[g >= off] - off  # global queries: one dense row each over all keys
    if rows.numel():
        gm = torch.ones(rows.numel(), tk, dtype=torch.bool, device=dev)
        if causal:
            gm = gm & (torch.arange(tk, device=dev)[None] <= (rows + off)[:, None])
        gm = gm if real is None else gm & real[:, None, None, :]
        gout, _ = attend(q[:, :, rows], k, v, mask=gm, dropout_p=dropout_p, scale=scale)
        out = out.index_copy(2, rows, gout)
    return out


_compiled: dict[str, Callable[..., Any]] = {}


def _flex(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    left: int,
    right: int,
    g: Tensor,
    real: Tensor | None,
    causal: bool,
    scale: float | None,
) -> Tensor:
    """FlexAttention with a block mask; compiled (eager flex materialises every score).

    On CPU (torch 2.13) forward only: flex has no CPU backward.
    """
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if not _compiled:  # compiled once per process; eager create_block_mask is ~1 s at 4k
        _compiled["flex"] = torch.compile(flex_attention, dynamic=False)
        _compiled["block_mask"] = torch.compile(create_block_mask, dynamic=False)
    tq, tk = q.size(-2), k.size(-2)
    off = tk - tq
    is_global = torch.zeros(tk, dtype=torch.bool, device=q.device)
    is_global[g] = True

    def mask_mod(b: Tensor, h: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
        rel = kj - (qi + off)
        ok = ((rel >= -left) & (rel <= right)) | is_global[kj] | is_global[qi + off]
        if causal:
            ok = ok & (rel <= 0)
        if real is not None:
            ok = ok & real[b, kj]
        return ok

    bsz = None if real is None else q.size(0)
    block = _compiled["block_mask"](mask_mod, bsz, None, tq, tk, device=q.device)
    out: Tensor = _compiled["flex"](q, k, v, block_mask=block, scale=scale)
    return out


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
