"""Multi-head attention (§3.2.2): h parallel heads of dimension d_k = d_model / h.

Self-attention uses one fused QKV projection (one matmul instead of three);
cross-attention projects the queries from the decoder and the keys/values
from the encoder output with one fused KV matmul. The projection is stored
as one ``(3 * d_model, d_model)`` weight, the same layout as
``torch.nn.MultiheadAttention.in_proj_weight``.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.attention.cache import KVCache
from attnkit.attention.functional import attend


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention.

    Args:
        d_model: model width D.
        num_heads: number of heads h (D must be divisible by h).
        dropout: dropout on the attention weights.
        bias: use biases in the projections.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(
                f"num_heads: d_model={d_model} is not divisible by num_heads={num_heads}"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.dropout = dropout
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _heads(self, x: Tensor) -> Tensor:
        """``(B, T, D)`` -> ``(B, h, T, d)``."""
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``memory`` ``(B, S, D)``, ``(B, h, S, d)`` each.

        Used for cross-attention, and by the decoder to compute them once per
        source sentence for the KV cache.
        """
        d = self.d_model
        bias = None if self.qkv_proj.bias is None else self.qkv_proj.bias[d:]
        k, v = F.linear(memory, self.qkv_proj.weight[d:], bias).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | tuple[Tensor, Tensor] | None = None,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` ``(B, T, D)`` to itself or to ``memory``.

        Args:
            memory: ``None`` for self-attention; the encoder output
                ``(B, S, D)`` for cross-attention; or its already projected
                ``(k, v)`` ``(B, h, S, d)`` (from ``project_kv``/the cache).
            mask: bool, broadcastable to ``(B, h, T, S)``, True = may attend.
            is_causal: causal self-attention (aligned to the last keys).
            need_weights: also return per-head weights ``(B, h, T, S)``.
            cache: self-attention only; the new keys/values are appended to
                ``cache`` at ``layer`` and attention runs over all of them.

        Returns:
            ``(out (B, T, D), weights or None)``.
        """
        d = self.d_model
        if memory is None:
            q, k, v = (self._heads(p) for p in self.qkv_proj(x).chunk(3, dim=-1))
            if cache is not None:
                k, v = cache.update(layer, k, v)
        else:
            bias = None if self.qkv_proj.bias is None else self.qkv_proj.bias[:d]
            q = self._heads(F.linear(x, self.qkv_proj.weight[:d], bias))
            k, v = memory if isinstance(memory, tuple) else self.project_kv(memory)

        out, weights = attend(
            q,
            k,
            v,
            mask=mask,
            is_causal=is_causal,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
        )
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, d)
        return self.out_proj(out), weights
