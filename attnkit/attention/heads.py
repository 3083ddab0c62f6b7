"""What self- and cross-attention share: the head split, the score, the merge.

Multi-head attention (§3.2.2) runs ``h`` heads of dimension ``d = D / h`` side
by side. Both attention modules (``MultiHeadAttention`` for self-attention,
``CrossAttention`` for a decoder's attention over the encoder output) project
their inputs, split them into heads here, hand the heads to their attention
backend, then merge the heads and apply ``out_proj``.

Shapes: ``B`` batch, ``T`` length, ``D`` d_model, ``h`` heads, ``h_kv``
key/value heads, ``d`` head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnkit.attention.gqa import check_kv_heads
from attnkit.attention.scores import KEY_SCORES, Score, build_score
from attnkit.errors import ConfigError


def check_heads(d_model: int, num_heads: int, num_kv_heads: int | None) -> int:
    """Validate a head split; returns ``h_kv``.

    ``ValueError`` naming ``num_heads`` unless ``h`` divides ``D``;
    ``ConfigError`` naming ``num_kv_heads`` unless ``h_kv`` divides ``h``.
    """
    if num_heads < 1 or d_model % num_heads != 0:
        raise ValueError(f"num_heads: d_model={d_model} is not divisible by num_heads={num_heads}")
    kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    check_kv_heads(num_heads, kv_heads)
    return kv_heads


def split_heads(x: Tensor, heads: int, head_dim: int) -> Tensor:
    """``(B, T, heads * d)`` -> ``(B, heads, T, d)`` (a view)."""
    b, t, _ = x.shape
    return x.view(b, t, heads, head_dim).transpose(1, 2)


def merge_heads(out: Tensor) -> Tensor:
    """``(B, h, T, d)`` -> ``(B, T, h d)``, ready for ``out_proj``."""
    b, h, t, d = out.shape
    return out.transpose(1, 2).reshape(b, t, h * d)


def head_score(score: str, head_dim: int) -> Score | None:
    """The score module of an attention layer; ``None`` for ``"scaled_dot"``.

    ``None`` keeps the paper's score on the fused kernel and adds nothing to
    the state dict. ``ConfigError`` names ``score`` for a score that does not
    compare queries with keys (``"location"``).
    """
    if score not in KEY_SCORES:
        raise ConfigError(
            f"score: expected one of {', '.join(KEY_SCORES)} for multi-head attention; "
            f"got {score!r}"
        )
    if score == "scaled_dot":
        return None
    return build_score(score, query_dim=head_dim, key_dim=head_dim)


def check_key_dim(key_dim: int | None, head_dim: int) -> int:
    """``d_k``: ``key_dim``, or the head size when ``None``; ``ConfigError`` unless
    ``1 <= key_dim <= head_dim`` (keys are padded up to the value size, never cut)."""
    if key_dim is None:
        return head_dim
    if not 1 <= key_dim <= head_dim:
        raise ConfigError(
            f"key_dim: must be between 1 and d_model / num_heads = {head_dim}, got {key_dim}"
        )
    return key_dim


def pad_keys(x: Tensor, head_dim: int) -> Tensor:
    """Queries or keys ``(B, h, T, d_k)`` padded with zeros to ``(B, h, T, head_dim)``.

    Zeros add nothing to ``q . k``: attention over the padded heads equals
    attention with ``d_k``-sized ones at the scale ``1 / sqrt(d_k)``, while the
    caches and kernels see one head size for keys and values.
    """
    pad = head_dim - x.size(-1)
    return x if pad == 0 else torch.nn.functional.pad(x, (0, pad))
