"""Attention for one query per row on the CPU: a decode step's shape, as two batched GEMVs.

A decode step asks ``(B, h, 1, d)`` queries against ``(B, h_kv, T, d)`` keys.
PyTorch's fused CPU kernel is built for long query blocks; at one query it
costs several times the arithmetic (issue 12's profile: 30-46% of an int8
greedy step; ``bench/attention_tq1.py`` times the alternatives). Here the
same computation is ``bmm -> softmax -> bmm`` on ``(B * h_kv, g, T)``, with
``g = h / h_kv`` query heads per key/value head, so grouped-query attention
reads each cached key once instead of repeating it per query head.

The result equals ``F.scaled_dot_product_attention`` to float rounding
(tested); ``attend`` takes this path only for inference on the CPU.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def use_one_query_path(q: Tensor, k: Tensor) -> bool:
    """Whether ``attend`` should take ``one_query_attention`` for these tensors."""
    return (
        q.dim() == 4
        and q.size(-2) == 1
        and q.device.type == "cpu"
        and not (q.requires_grad or k.requires_grad)
        and q.size(1) % k.size(1) == 0
    )


def one_query_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float | None
) -> Tensor:
    """``softmax(q k^T * scale + mask) v`` for ``q`` ``(B, h, 1, d)``.

    Args:
        k, v: ``(B, h_kv, T, d)`` with ``h_kv`` dividing ``h`` (query head ``i``
            reads key/value head ``i // (h / h_kv)``, as ``repeat_kv`` lays them out).
        mask: bool, broadcastable to ``(B, h, 1, T)``, True = may attend. A row
            that may attend to no key gives zeros (as ``attend`` promises).

    Returns:
        ``(B, h, 1, dv)``.
    """
    b, h, _, d = q.shape
    h_kv, t = k.size(1), k.size(2)
    g = h // h_kv
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    # (B * h_kv, g, d) x (B * h_kv, d, T): the g query heads of one kv head in one GEMM
    scores = torch.bmm(q.reshape(b * h_kv, g, d), k.reshape(b * h_kv, t, d).transpose(1, 2))
    scores = scores.view(b, h, 1, t)
    # half-precision scores are normalised in fp32, as the fused kernels do
    acc = torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype
    if mask is None:
        weights = torch.softmax(scores.mul_(scale), dim=-1, dtype=acc).to(q.dtype)
        has_key = None
    else:
        # The mask is small (usually (B, 1, 1, T)): turn it into an additive one and
        # add it with the scale in one op. The most negative finite value, not -inf:
        # a row with no key stays finite (uniform, then zeroed below); exp() of it is 0.
        # (where() builds it in the default float32: a float64 floor would not fit)
        floor = max(torch.finfo(scores.dtype).min, torch.finfo(torch.float32).min) / 2
        additive = torch.where(mask, 0.0, floor).to(scores.dtype)
        logits = torch.add(additive, scores, alpha=scale)
        weights = torch.softmax(logits, dim=-1, dtype=acc).to(q.dtype)
        has_key = mask.any(dim=-1, keepdim=True)
    out = torch.bmm(weights.view(b * h_kv, g, t), v.reshape(b * h_kv, t, v.size(-1)))
    out = out.view(b, h, 1, v.size(-1))
    return out if has_key is None else out * has_key
