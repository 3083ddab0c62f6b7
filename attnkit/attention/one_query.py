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

A decoder passes the same mask tensors at every step (the source padding
mask, a cache's validity mask updated in place), so their additive form and
whether every row sees a key are remembered per tensor object and version
(``_additive``): at one query the mask work would otherwise cost as much as
the attention itself.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict

import torch
from torch import Tensor

_MASKS: OrderedDict[int, tuple[weakref.ref[Tensor], int, torch.dtype, Tensor, Tensor | None]]
_MASKS = OrderedDict()
_MASKS_LOCK = threading.Lock()
_MASKS_KEPT = 8  # a decoder's self and cross masks, a few decodes at once


def _fresh(mask: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``mask`` as an additive float tensor, and which rows see a key at all."""
    # The most negative finite value, not -inf: a row with no key stays finite
    # (uniform weights, then zeroed) instead of NaN; exp() of it is 0. where() builds
    # it in the default float32, which a float64 floor would not fit.
    floor = max(torch.finfo(dtype).min, torch.finfo(torch.float32).min) / 2
    return torch.where(mask, 0.0, floor).to(dtype), mask.any(dim=-1, keepdim=True)


def _additive(mask: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
    """``_fresh(mask)``, with ``has_key`` ``None`` when every row sees a key (the usual
    case: then nothing is zeroed). Remembered per tensor object and version, so an
    in-place update (a cache's mask) is seen. Tensors made under ``inference_mode``
    keep no version counter: theirs are computed afresh at every call."""
    if mask.is_inference():
        return _fresh(mask, dtype)
    key = id(mask)
    with _MASKS_LOCK:
        hit = _MASKS.get(key)
    if hit is not None and hit[0]() is mask and hit[1] == mask._version and hit[2] == dtype:
        return hit[3], hit[4]
    additive, has_key = _fresh(mask, dtype)
    kept = None if bool(has_key.all()) else has_key
    with _MASKS_LOCK:
        _MASKS[key] = (weakref.ref(mask), mask._version, dtype, additive, kept)
        while len(_MASKS) > _MASKS_KEPT:
            _MASKS.popitem(last=False)
    return additive, kept


def use_one_query_path(q: Tensor, k: Tensor) -> bool:
    """Whether ``attend`` should take ``one_query_attention`` for these tensors.

    Not under ``torch.compile``: the mask cache is Python state a graph cannot
    hold, and inductor fuses the SDPA path itself (a compiled step is unchanged).
    """
    return (
        not torch.compiler.is_compiling()
        and q.dim() == 4
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
        additive, has_key = _additive(mask, scores.dtype)
        logits = torch.add(additive, scores, alpha=scale)  # the mask and the scale in one op
        weights = torch.softmax(logits, dim=-1, dtype=acc).to(q.dtype)
    out = torch.bmm(weights.view(b * h_kv, g, t), v.reshape(b * h_kv, t, v.size(-1)))
    out = out.view(b, h, 1, v.size(-1))
    return out if has_key is None else out * has_key
