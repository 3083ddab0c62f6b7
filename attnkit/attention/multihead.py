"""Multi-head self-attention (§3.2.2): h parallel heads of dimension d_k = d_model / h.

Queries, keys and values come from the same input, so they are one fused
projection ``qkv_proj`` (one matmul instead of three), stored as one
``(d_model + 2 h_kv d, d_model)`` weight (queries, keys, values), the layout of
``torch.nn.MultiheadAttention.in_proj_weight`` when ``h_kv = h``. A decoder's
attention over the encoder output is ``attnkit.attention.cross.CrossAttention``.

What a module receives beside its projections (composition: parts, not flags):

* ``num_kv_heads``: grouped-query attention (Ainslie et al., 2023): ``h_kv``
  key/value heads shared by groups of ``h / h_kv`` query heads; the KV cache
  holds ``h_kv`` heads only.
* ``relative_positions`` (``RelativePositions``; Shaw et al., 2018): tables
  added to every head's keys and values, with query ``i`` at position ``Tk - Tq + i``.
* ``rotary`` (``RotaryEmbedding``; RoPE, Su et al., 2021): queries and keys
  rotated by their positions before the cache stores the keys.
* ``alibi`` (``ALiBi``; Press et al., 2022): a per-head linear penalty
  ``-m_h |i - j|`` added to the scores (``attnkit.positions.alibi.alibi_bias``).
* ``position_bias`` (``T5RelativeBias``; Raffel et al., 2020): a learned scalar
  per head and bucket of ``key - query``, added to the scores; one table is
  shared by every layer of a stack.
* ``window`` (``LocalWindow``): each query sees the keys of a sliding window
  plus global tokens; a whole sequence runs through ``local_attention`` (chunked
  when it is long, unless another term shapes the scores), a cached step
  through the backend with the band as a mask (``block_sparse_mask``).
* ``backend`` (``attnkit.attention.backends``): how softmax attention is
  computed, ``REFERENCE`` unless the decoding strategy installs another.
* ``key_dim``: ``d_k``, the size of a head's queries and keys, when it is
  smaller than the value size ``d_v = D / h`` (the paper's Table 3, row B).
  The projections are that much smaller; the queries and keys are then padded
  with zeros to ``d_v`` (``pad_keys``), which adds nothing to ``q . k``, so the
  caches, kernels and backends keep one head size; the scale stays
  ``1 / sqrt(d_k)``.

Positions come from the cache view when decoding (``LayerCache.query_positions``),
else ``0 .. T - 1``.

The score function is a string (``attnkit.attention.scores``): ``scaled_dot``
(the paper's, on the fused kernel), ``dot``, ``general`` (one ``(d, d)``
matrix shared by all heads) or ``additive`` (its weights shared by all heads).

Shapes: ``B`` batch, ``T`` query length, ``S`` key length, ``D`` d_model,
``h`` heads, ``h_kv`` key/value heads, ``d`` head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.attention.backends import REFERENCE, AttentionBackend
from attnkit.attention.cache import LayerCache
from attnkit.attention.heads import (
    check_heads,
    check_key_dim,
    head_score,
    merge_heads,
    pad_keys,
    split_heads,
)
from attnkit.attention.local import LocalWindow
from attnkit.attention.masks import Mask, bool_mask
from attnkit.errors import ConfigError
from attnkit.positions.alibi import ALiBi
from attnkit.positions.relative import RelativePositions
from attnkit.positions.rotary import RotaryEmbedding, apply_rotary
from attnkit.positions.t5_relative import T5RelativeBias
from attnkit.roles import Projection, Roles, linears_as, projection


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention (see the module doc for the parts it receives).

    Args:
        d_model: model width D.
        num_heads: number of heads h (D must be divisible by h).
        dropout: dropout on the attention weights.
        bias: use biases in the projections.
        num_kv_heads: key/value heads (divides h; default h).
        relative_positions, rotary, alibi, position_bias, window: position terms and reach.
        score: ``"scaled_dot"`` (default), ``"dot"``, ``"general"`` or ``"additive"``.
        backend: how attention is computed (default ``REFERENCE``).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        num_kv_heads: int | None = None,
        relative_positions: RelativePositions | None = None,
        rotary: RotaryEmbedding | None = None,
        alibi: ALiBi | None = None,
        position_bias: T5RelativeBias | None = None,
        window: LocalWindow | None = None,
        score: str = "scaled_dot",
        backend: AttentionBackend = REFERENCE,
        key_dim: int | None = None,
    ) -> None:
        super().__init__()
        kv_heads = check_heads(d_model, num_heads, num_kv_heads)
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, kv_heads
        self.head_dim = d_model // num_heads
        self.key_dim = check_key_dim(key_dim, self.head_dim)
        # padded keys (pad_keys) keep the scale of d_k; None: the backend's 1 / sqrt(d)
        self.key_scale = None if self.key_dim == self.head_dim else self.key_dim**-0.5
        self.kv_dim = kv_heads * self.head_dim
        self.dropout = dropout
        sizes = (num_heads * self.key_dim, kv_heads * self.key_dim, self.kv_dim)
        self.qkv_sizes = sizes  # queries, keys, values: the fused projection's split
        self.qkv_proj = nn.Linear(d_model, sum(sizes), bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        if relative_positions is not None and relative_positions.key.size(1) != self.head_dim:
            raise ValueError(
                f"relative_positions: tables have size {relative_positions.key.size(1)}, "
                f"expected the head dim {self.head_dim}"
            )
        if alibi is not None and alibi.slopes.numel() != num_heads:
            raise ValueError(f"alibi: {alibi.slopes.numel()} slopes for {num_heads} heads")
        self.relative_positions = relative_positions
        self.rotary = rotary
        if position_bias is not None and position_bias.table.embedding_dim != num_heads:
            raise ValueError(
                f"position_bias: {position_bias.table.embedding_dim} heads for {num_heads} heads"
            )
        self.alibi = alibi
        self.position_bias = position_bias
        self.window = window
        biased = alibi is not None or position_bias is not None
        positional = relative_positions is not None or biased or rotary is not None
        if positional and score not in ("dot", "scaled_dot"):
            raise ConfigError(f"score: position terms need a dot-product score, got {score!r}")
        if self.key_dim != self.head_dim and (
            score != "scaled_dot" or relative_positions is not None or rotary is not None
        ):
            raise ConfigError(
                "key_dim: a key size below d_model / num_heads needs the scaled dot score "
                "and no relative or rotary positions"
            )
        self.score = head_score(score, self.head_dim)
        # Whole sequences of a local layer go through local_attention, which adds
        # nothing to the scores: only when no other term does.
        plain = self.score is None and relative_positions is None and not biased
        self.local_sequences = window is not None and plain
        self.backend = backend

    def roles(self) -> Roles:
        """``qkv_proj``: query, key and value rows (``qkv_sizes``); ``out_proj``: ``o``;
        a score's own linears are not projections of the stream (principle 16)."""
        fused = Projection("qkv_proj", ("q", "k", "v"), self.qkv_sizes)
        score = linears_as("score", self.score, "score")
        return Roles((fused, projection("out_proj", "o"), *score))

    def forward(
        self,
        x: Tensor,
        *,
        mask: Mask | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: LayerCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` ``(B, T, D)`` to itself.

        Args:
            mask: bool, broadcastable to ``(B, h, T, S)``, True = may attend.
            is_causal: causal self-attention (aligned to the last keys).
            need_weights: also return per-head weights ``(B, h, T, S)``.
            cache: this layer's view of a decoder cache; the new keys/values
                are stored in it and attention runs over every key it returns
                (the queries are the newest positions).

        Returns:
            ``(out (B, T, D), weights or None)``.
        """
        t = x.size(1)
        q_, k_, v_ = self.qkv_proj(x).split(self.qkv_sizes, dim=-1)
        q = pad_keys(split_heads(q_, self.num_heads, self.key_dim), self.head_dim)
        k = pad_keys(split_heads(k_, self.num_kv_heads, self.key_dim), self.head_dim)
        v = split_heads(v_, self.num_kv_heads, self.head_dim)
        positions = None  # of the queries, for the parts that need them
        if any(p is not None for p in (self.rotary, self.alibi, self.position_bias, self.window)):
            positions = (
                cache.query_positions(t) if cache is not None else torch.arange(t, device=x.device)
            )
        if self.rotary is not None:
            assert positions is not None
            q, k = apply_rotary(q, k, *self.rotary(positions))  # before the cache stores k
        if cache is not None:
            k, v = cache.update(k, v)
        dropout = self.dropout if self.training else 0.0
        tq, tk = q.size(2), k.size(2)
        if self.window is not None and self.local_sequences and tq == tk:  # a whole sequence
            out, weights = self.window.attend(
                q, k, v, mask=bool_mask(mask), is_causal=is_causal, dropout_p=dropout,
                need_weights=need_weights,
            )  # fmt: skip
            return self.out_proj(merge_heads(out)), weights
        bias = None
        if self.alibi is not None:
            assert positions is not None
            bias = self.alibi(positions, tk, q.dtype)
        if self.position_bias is not None:
            assert positions is not None
            t5 = self.position_bias(positions, tk).to(q.dtype)
            bias = t5 if bias is None else bias + t5
        if self.window is not None:
            assert positions is not None
            band = self.window.mask(positions, tk)
            given = bool_mask(mask)
            mask = band if given is None else given & band
        out, weights = self.backend(
            q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout, need_weights=need_weights,
            position=(
                None if self.relative_positions is None
                else self.relative_positions(tq, tk, device=q.device)  # queries: the last Tq keys
            ),
            score=self.score,
            bias=bias,
            scale=self.key_scale,
        )  # fmt: skip
        return self.out_proj(merge_heads(out)), weights

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"window={self.window}, backend={self.backend!r}"
        )
