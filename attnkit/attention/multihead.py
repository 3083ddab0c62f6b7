"""Multi-head attention (§3.2.2): h parallel heads of dimension d_k = d_model / h.

Self-attention uses one fused QKV projection (one matmul instead of three);
cross-attention projects the queries from the decoder and the keys/values
from the encoder output with one fused KV matmul. The projection is stored
as one ``(3 * d_model, d_model)`` weight, the same layout as
``torch.nn.MultiheadAttention.in_proj_weight``.

A self-attention module may receive ``relative_positions`` (Shaw et al., 2018):
its tables are then added to every head's keys and values (shared across
heads), with query ``i`` at position ``Tk - Tq + i`` so the KV cache needs no
change. Cross-attention has no relative positions, as in the paper.

The score function is a string (``attnkit.attention.scores``): ``scaled_dot``
(the paper's, on the fused kernel), ``dot``, ``general`` (one ``(d, d)``
matrix shared by all heads) or ``additive`` (attention dim ``d``, its weights
shared by all heads), where ``d`` is the head dim. For general, a per-head
``W`` would add nothing (each head's query projection can absorb it); for
additive, sharing keeps the parameters at ``2 d^2 + d`` per module.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.attention.cache import LayerCache
from attnkit.attention.functional import attend
from attnkit.attention.scores import KEY_SCORES, Score, build_score
from attnkit.errors import ConfigError
from attnkit.positions.relative import RelativePositions


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention.

    Args:
        d_model: model width D.
        num_heads: number of heads h (D must be divisible by h).
        dropout: dropout on the attention weights.
        bias: use biases in the projections.
        relative_positions: Shaw-style key/value tables (self-attention only),
            of the head dimension ``d_model // num_heads``.
        score: ``"scaled_dot"`` (default), ``"dot"``, ``"general"`` or
            ``"additive"``; the last two are modules, shared by the heads.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        relative_positions: RelativePositions | None = None,
        score: str = "scaled_dot",
    ):
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
        if relative_positions is not None and relative_positions.key.size(1) != self.head_dim:
            raise ValueError(
                f"relative_positions: tables have size {relative_positions.key.size(1)}, "
                f"expected the head dim {self.head_dim}"
            )
        self.relative_positions = relative_positions
        if score not in KEY_SCORES:
            raise ConfigError(
                f"score: expected one of {', '.join(KEY_SCORES)} for multi-head attention; "
                f"got {score!r}"
            )
        if relative_positions is not None and score not in ("dot", "scaled_dot"):
            raise ConfigError(f"score: relative positions need a dot-product score, got {score!r}")
        # None keeps the default on the fused kernel and the state-dict keys unchanged.
        self.score: Score | None = (
            None
            if score == "scaled_dot"
            else build_score(score, query_dim=self.head_dim, key_dim=self.head_dim)
        )

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
        cache: LayerCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` ``(B, T, D)`` to itself or to ``memory``.

        Args:
            memory: ``None`` for self-attention; the encoder output
                ``(B, S, D)`` for cross-attention; or its already projected
                ``(k, v)`` ``(B, h, S, d)`` (from ``project_kv``/the cache).
            mask: bool, broadcastable to ``(B, h, T, S)``, True = may attend.
            is_causal: causal self-attention (aligned to the last keys).
            need_weights: also return per-head weights ``(B, h, T, S)``.
            cache: self-attention only: this layer's view of a decoder cache;
                the new keys/values are stored in it and attention runs over
                every key it returns (the queries are the newest positions).

        Returns:
            ``(out (B, T, D), weights or None)``.
        """
        d = self.d_model
        if memory is not None and self.relative_positions is not None:
            raise ValueError("memory: relative positions are for self-attention only")
        if memory is None:
            q, k, v = (self._heads(p) for p in self.qkv_proj(x).chunk(3, dim=-1))
            if cache is not None:
                k, v = cache.update(k, v)
        else:
            bias = None if self.qkv_proj.bias is None else self.qkv_proj.bias[:d]
            q = self._heads(F.linear(x, self.qkv_proj.weight[:d], bias))
            k, v = memory if isinstance(memory, tuple) else self.project_kv(memory)

        position = None
        if self.relative_positions is not None:
            # Keys are positions 0 .. Tk-1; queries the last Tq of them.
            position = self.relative_positions(q.size(2), k.size(2), device=q.device)
        out, weights = attend(
            q,
            k,
            v,
            mask=mask,
            is_causal=is_causal,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
            position=position,
            score=self.score,
        )
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, d)
        return self.out_proj(out), weights
