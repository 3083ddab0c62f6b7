"""The two paths of ``local_attention`` that never build the ``(Tq, Tk)`` mask.

``chunked_local`` (``impl="chunked"``): queries in blocks of ``c``; each block
meets only its key window of ``c + left + right`` keys (an ``unfold`` view of
the padded keys), plus the ``g`` global keys; one batched SDPA call for all
blocks. Scores and mask take ``O(B h T (c + w + g))`` memory; the ``g`` global
query rows are one dense ``(g, Tk)`` call on top.

``flex_local`` (``impl="flex"``): FlexAttention with a block mask, compiled
once per process; forward only on CPU (``attnkit.attention.local``'s module
docstring says why).

Both take the band as ``left``/``right`` keys either side of a query, the
global key positions ``g`` (``local_masks.global_positions``) and ``real``
``(B, Tk)`` (True = real key, or None); the queries are the last ``Tq`` keys.
Shapes: ``B`` batch, ``h`` heads, ``Tq``/``Tk`` lengths, ``d`` head dim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.attention.functional import attend

__all__ = ["chunked_local", "flex_local"]


def chunked_local(
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


def flex_local(
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
