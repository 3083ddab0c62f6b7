"""Grouped-query and multi-query attention (Ainslie et al., 2023; Shazeer, 2019).

Multi-query attention (Shazeer, 2019, "Fast Transformer Decoding: One
Write-Head is All You Need") keeps one key/value head for all query heads,
so the KV cache (the memory-bandwidth bottleneck of decoding) shrinks by
``h``. Grouped-query attention (Ainslie et al., 2023, "GQA") interpolates:
``h_kv`` key/value heads, each shared by a group of ``h / h_kv`` consecutive
query heads (query head ``i`` reads kv head ``i // (h / h_kv)``, the layout
of Llama checkpoints). ``h_kv == h`` is plain multi-head attention,
``h_kv == 1`` is multi-query attention.

The cache holds only the ``h_kv`` heads. They are widened to ``h`` only at the
attention call, and only where a kernel needs it:

* the fused path: ``F.scaled_dot_product_attention(..., enable_gqa=True)``
  reads the grouped K/V directly. On CPU in torch 2.13 it works with bool
  and float masks, ``is_causal`` and autograd, gives bit-identical results to
  ``repeat_kv`` (fp32, fp64, bf16), and is faster: at SmolLM2-135M's shapes
  (9 query heads, 3 kv heads, head dim 64) a decoding step over 128-1024
  cached positions took ~0.4-0.5x the time of ``repeat_kv`` + SDPA, and a
  causal prompt of 128-512 tokens about the same (``bench/gqa_sdpa.py``);
* explicit paths (weights requested, relative positions, custom scores):
  ``repeat_kv`` first, then the textbook computation.

Shapes: ``B`` batch, ``h`` query heads, ``h_kv`` key/value heads, ``T`` positions, ``d`` head dim.
"""

from __future__ import annotations

from torch import Tensor

from attnkit.errors import ConfigError


def check_kv_heads(num_heads: int, num_kv_heads: int) -> int:
    """Validate a GQA head split; returns the group size ``h / h_kv``."""
    if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
        raise ConfigError(
            f"num_kv_heads: must be >= 1 and divide num_heads={num_heads}, got {num_kv_heads}"
        )
    return num_heads // num_kv_heads


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """``(B, h_kv, T, d) -> (B, h_kv * n_rep, T, d)``: kv heads repeated (a copy).

    Head ``j`` of the result is kv head ``j // n_rep`` (kv0, kv0, ..., kv1, ...),
    matching query heads grouped consecutively. ``n_rep == 1`` returns ``x``.
    """
    if n_rep == 1:
        return x
    if n_rep < 1:
        raise ValueError(f"n_rep: must be >= 1, got {n_rep}")
    b, h_kv, t, d = x.shape
    return x[:, :, None].expand(b, h_kv, n_rep, t, d).reshape(b, h_kv * n_rep, t, d)
