"""Scaled dot-product attention as one function (§3.2.1 of the paper).

``attend`` takes PyTorch's fused ``F.scaled_dot_product_attention`` whenever
nobody asked for the weights, and an explicit reference path that returns
them otherwise. Both give the same values and gradients (tested). It is the
reference attention backend (``attnkit.attention.backends``); faster ways to
compute the same function for a given strategy (a CPU decode step:
``attnkit.attention.one_query``) are other backends, handed to the attention
modules where that strategy is chosen, never picked here.

Relative positions (Shaw et al., 2018; ``attnkit.positions.relative``) take a
third, explicit path, using the paper's efficient split (§3.3) so no
``(B, h, Tq, Tk, d)`` tensor is ever built:

* key term ``q_i . a^K_ij``: ``q`` ``(B, h, Tq, d)`` times the ``(R, d)`` table
  gives ``(B, h, Tq, R)``, gathered by the clipped distance into an additive
  ``(B, h, Tq, Tk)`` score bias;
* value term ``sum_j alpha_ij a^V_ij``: the weights ``(B, h, Tq, Tk)`` are
  summed into their ``R`` distance buckets (``scatter_add``), then times the
  ``(R, d)`` table.

The value term needs the weights, so that path is explicit; a key-only term
goes through the fused kernel as a float mask. (FlexAttention with a
``score_mod`` is the GPU follow-up for the key term.)

Other score functions (``attnkit.attention.scores``: general, additive,
location, or any callable ``(q, k) -> scores``) take the explicit path:
scores -> mask -> softmax -> dropout -> ``@ v``. Scaled dot stays on the fused
kernel, and so does plain dot (it is scaled dot with ``scale=1``).

Shapes: ``B`` batch, ``h`` heads, ``Tq``/``Tk`` query/key lengths, ``d`` head dim.
Any leading dims work (``(B,)`` for an RNN decoder's single "head").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.attention.gqa import repeat_kv
from attnkit.attention.scores import DotScore, ScaledDotScore, dot_score, scaled_dot_score
from attnkit.positions.relative import RelativePositionTerms

ScoreFn = Callable[[Tensor, Tensor], Tensor]
"""``score(q (..., Tq, dq), k (..., Tk, dk)) -> (..., Tq, Tk)``."""


def _guard_empty_rows(mask: Tensor) -> tuple[Tensor, Tensor]:
    """Un-mask rows that see no key, so no kernel meets an all ``-inf`` softmax row.

    Returns the mask to use and a bool ``(..., Tq, 1)`` marking rows that do see
    a key; the others are zeroed after attention. Deliberately sync-free (no
    ``if mask.all()``), so it costs one small reduction and never stalls a GPU.
    """
    has_key = mask.any(dim=-1, keepdim=True)
    return mask | ~has_key, has_key


def resolve_score(
    score: ScoreFn | None, scale: float | None
) -> tuple[ScoreFn | None, float | None]:
    """``(the score to compute explicitly, or None for a dot product; the scale)``.

    Scaled dot (the default) and plain dot (scale 1) run as scaled dot
    products; any other score must be computed, and takes no scale.
    """
    if score is None or score is scaled_dot_score or isinstance(score, ScaledDotScore):
        return None, scale
    if score is dot_score or isinstance(score, DotScore):
        return None, 1.0 if scale is None else scale
    if scale is not None:
        raise ValueError("scale: only the dot-product scores take a scale")
    return score, None


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    scale: float | None = None,
    position: RelativePositionTerms | None = None,
    score: ScoreFn | None = None,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Attention(Q, K, V) = softmax(score(Q, K)) V, by default softmax(Q K^T / sqrt(d)) V.

    Args:
        q: ``(B, h, Tq, d)``; k: ``(B, h, Tk, d)``; v: ``(B, h, Tk, dv)``.
        mask: bool, broadcastable to ``(B, h, Tq, Tk)``, True = may attend.
        is_causal: apply a causal mask (aligned to the last ``Tq`` keys);
            combined with ``mask`` when both are given.
        dropout_p: dropout on the attention weights (pass 0.0 in eval).
        need_weights: also return the weights ``(B, h, Tq, Tk)`` (pre-dropout).
        scale: defaults to ``1 / sqrt(d)`` (``1`` for a dot score); for
            the dot-product scores only.
        position: relative position terms (Shaw et al.) for self-attention:
            ``index`` ``(Tq, Tk)`` into ``(R, d)`` key/value tables; the key
            term is scaled with the scores, as in the paper.
        score: the score function (``attnkit.attention.scores``). ``None`` or
            scaled dot: the fused kernel as before; dot: the same with scale 1;
            anything else: the explicit path (no relative positions).
        bias: an additive score bias broadcastable to ``(B, h, Tq, Tk)``
            (ALiBi's ``-m (i - j)``); dot-product scores only.

    Grouped-query attention: ``k``/``v`` may have fewer heads than ``q``
    (``h`` a multiple of ``h_kv``); query head ``i`` reads kv head
    ``i // (h / h_kv)``.

    Returns:
        ``(out (B, h, Tq, dv), weights or None)``. A query row whose keys are
        all masked returns zeros (and zero weights), never NaN.
    """
    tq, tk = q.size(-2), k.size(-2)
    groups = q.size(-3) // k.size(-3) if q.dim() >= 3 and k.dim() >= 3 else 1
    custom, scale = resolve_score(score, scale)
    if custom is not None and (position is not None or bias is not None):
        raise ValueError("position: relative and bias terms need a dot-product score")
    if is_causal and tq == 1:
        is_causal = False  # one query at the newest position sees every key
    explicit = need_weights or position is not None or custom is not None
    if groups > 1 and explicit:  # the explicit paths want one key/value head per query head
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
        groups = 1
    if is_causal and (mask is not None or tq != tk or explicit or bias is not None):
        # SDPA's is_causal aligns to the top-left; build the explicit mask so a
        # cached decoder (Tq < Tk) and the weights path agree with it.
        causal = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq)
        mask = causal if mask is None else mask & causal
        is_causal = False

    has_key = None
    if mask is not None:
        mask, has_key = _guard_empty_rows(mask)

    if position is not None:
        out, weights = _relative_attention(
            q, k, v, mask, dropout_p, scale, position, need_weights=need_weights
        )
    elif need_weights or custom is not None:
        out, weights = _reference_attention(q, k, v, mask, dropout_p, scale, custom, bias)
        weights = weights if need_weights else None
    else:
        attn_mask: Tensor | None = mask
        if bias is not None:  # a float mask: the bias, -inf where not allowed
            attn_mask = bias.to(q.dtype)
            if mask is not None:
                attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
            enable_gqa=groups > 1,
        )  # fmt: skip
        weights = None

    if has_key is not None:
        out = out.masked_fill(~has_key, 0.0)
        if weights is not None:
            weights = weights.masked_fill(~has_key, 0.0)
    return out, weights


def _reference_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    dropout_p: float,
    scale: float | None,
    score: ScoreFn | None = None,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The textbook computation, kept explicit so the weights can be returned."""
    if score is not None:
        scores = score(q, k)
    else:
        scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    # Half-precision scores are normalised in fp32, as the fused kernels do.
    acc = torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype
    weights = torch.softmax(scores, dim=-1, dtype=acc).to(q.dtype)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    return torch.matmul(dropped, v), weights


def _relative_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    dropout_p: float,
    scale: float | None,
    position: RelativePositionTerms,
    *,
    need_weights: bool,
) -> tuple[Tensor, Tensor | None]:
    """Attention with Shaw-style key/value terms, in ``O(B h Tq (Tk + R) d)``."""
    tq, tk = q.size(-2), k.size(-2)
    if position.index.shape != (tq, tk):
        raise ValueError(
            f"position: index has shape {tuple(position.index.shape)}, expected ({tq}, {tk})"
        )
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    bias = None
    if position.key is not None:
        # q_i . a^K_ij = (q_i . w^K)[r_ij]: (B, h, Tq, R), then gather to (B, h, Tq, Tk).
        rel = torch.matmul(q, position.key.to(q.dtype).transpose(0, 1))
        bias = rel.gather(-1, position.index.expand(*rel.shape[:-1], tk)) * scale

    if position.value is None and not need_weights:
        # Key term only: an additive float mask for the fused kernel.
        attn_mask = bias
        if mask is not None:
            attn_mask = mask if bias is None else bias.masked_fill(~mask, float("-inf"))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale
        )
        return out, None

    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    acc = torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype
    weights = torch.softmax(scores, dim=-1, dtype=acc).to(q.dtype)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    out = torch.matmul(dropped, v)
    if position.value is not None:
        # sum_j alpha_ij a^V_ij = sum_r (sum_{j: r_ij = r} alpha_ij) w^V[r].
        buckets = dropped.new_zeros(*dropped.shape[:-1], position.num_buckets)
        buckets = buckets.scatter_add(-1, position.index.expand(dropped.shape), dropped)
        out = out + torch.matmul(buckets, position.value.to(q.dtype))
    return out, (weights if need_weights else None)
