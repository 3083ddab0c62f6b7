"""The CPU decode backend: one query per row as two batched GEMVs (``OneQueryDecode``).

(And a few queries per row without a causal mask as two small GEMMs: beam search's
cross-attention, where a sentence's beams ask their queries together.)

A decode step asks ``(B, h, 1, d)`` queries against ``(B, h_kv, T, d)`` keys.
PyTorch's fused CPU kernel is built for long query blocks; at one query it
costs several times the arithmetic (issue 12's profile: 30-46% of an int8
greedy step; ``bench/attention_tq1.py`` times the alternatives). Here the
same computation is ``bmm -> softmax -> bmm`` on ``(B * h_kv, g, T)``, with
``g = h / h_kv`` query heads per key/value head, so grouped-query attention
reads each cached key once instead of repeating it per query head.

The result equals ``F.scaled_dot_product_attention`` to float rounding
(tested). ``OneQueryDecode`` takes this path for the calls it fits (one query,
no weights asked for, no dropout, no position terms or other score) and
hands every other call to ``attend``; ``attnkit.inference.stepper_for``
installs it for the CPU decode paths (``attnkit.attention.backends``).

The mask is added to the scores, so it is needed in additive form. A source
mask arrives prepared (``PreparedMask``: made once per decoding call by the
decoding state that owns it); any other mask (a static cache's validity mask,
a local window) is converted at the call.

Shapes: ``B`` batch, ``h`` query heads, ``h_kv`` key/value heads, ``g = h / h_kv``,
``T`` keys, ``d`` head dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnkit.attention.functional import ScoreFn, attend, resolve_score
from attnkit.attention.masks import Mask, PreparedMask, additive_mask, bool_mask
from attnkit.positions.relative import RelativePositionTerms

FEW_QUERIES = 16
"""Up to this many queries per row (and no causal mask) also take the two GEMMs:
beam search's cross-attention asks a sentence's ``K`` beams' queries at once
(``CrossAttention``), where the fused kernel cost ~0.7 ms a call for 4 queries
over 32 keys (``bench/profile_decode.py``, round 12: 13-18% of a beam step)."""


def one_query_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask | None, scale: float | None
) -> Tensor:
    """``softmax(q k^T * scale + mask) v`` for ``q`` ``(B, h, L, d)``, ``L`` small (no causal mask).

    Args:
        k, v: ``(B, h_kv, T, d)`` with ``h_kv`` dividing ``h`` (query head ``i``
            reads key/value head ``i // (h / h_kv)``, as ``repeat_kv`` lays them out).
        mask: bool, broadcastable to ``(B, h, L, T)``, True = may attend, or a
            ``PreparedMask``. A row that may attend to no key gives zeros (as
            ``attend`` promises).

    Returns:
        ``(B, h, L, dv)``.
    """
    b, h, n, d = q.shape
    h_kv, t = k.size(1), k.size(2)
    g = h // h_kv
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    # (B * h_kv, g L, d) x (B * h_kv, d, T): the g query heads of one kv head in one GEMM
    scores = torch.bmm(q.reshape(b * h_kv, g * n, d), k.reshape(b * h_kv, t, d).transpose(1, 2))
    scores = scores.view(b, h, n, t)
    # half-precision scores are normalised in fp32, as the fused kernels do
    acc = torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype
    has_key: Tensor | None = None
    if mask is None:
        weights = torch.softmax(scores.mul_(scale), dim=-1, dtype=acc).to(q.dtype)
    else:
        if isinstance(mask, PreparedMask) and mask.additive.dtype == scores.dtype:
            additive, has_key = mask.additive, mask.has_key
        else:
            allowed = mask.allowed if isinstance(mask, PreparedMask) else mask
            additive, has_key = additive_mask(allowed, scores.dtype)
        logits = torch.add(additive, scores, alpha=scale)  # the mask and the scale in one op
        weights = torch.softmax(logits, dim=-1, dtype=acc).to(q.dtype)
    out = torch.bmm(weights.view(b * h_kv, g * n, t), v.reshape(b * h_kv, t, v.size(-1)))
    out = out.view(b, h, n, v.size(-1))
    return out if has_key is None else out * has_key


class OneQueryDecode:
    """An ``AttentionBackend``: ``one_query_attention`` where it fits, ``attend`` elsewhere.

    It fits a call with one query per row (``q`` ``(B, h, 1, d)``, ``h_kv``
    dividing ``h``), or up to ``FEW_QUERIES`` without a causal mask (beam
    search's cross-attention), nothing but a mask shaping the scores (no position terms,
    bias or other score), no weights asked for and no dropout: a decode
    step. Whatever else reaches it (a prompt, a training step, weights for
    a plot) is computed by ``attend`` exactly as ``REFERENCE`` would.
    """

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        mask: Mask | None = None,
        is_causal: bool = False,
        dropout_p: float = 0.0,
        need_weights: bool = False,
        scale: float | None = None,
        position: RelativePositionTerms | None = None,
        score: ScoreFn | None = None,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        custom, dot_scale = resolve_score(score, scale)  # plain dot: scaled by 1
        if (
            custom is None
            and position is None
            and bias is None
            and not need_weights
            and dropout_p == 0.0
            and q.dim() == 4
            # one query sees every key (causality is moot); a few see them all unmasked
            and (q.size(-2) == 1 or (q.size(-2) <= FEW_QUERIES and not is_causal))
            and q.size(1) % k.size(1) == 0
        ):
            return one_query_attention(q, k, v, mask, dot_scale), None
        return attend(
            q, k, v, mask=bool_mask(mask), is_causal=is_causal, dropout_p=dropout_p,
            need_weights=need_weights, scale=scale, position=position, score=score, bias=bias,
        )  # fmt: skip

    def __repr__(self) -> str:
        return "OneQueryDecode()"
