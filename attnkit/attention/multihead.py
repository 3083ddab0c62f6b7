"""Multi-head attention (§3.2.2): h parallel heads of dimension d_k = d_model / h.

Self-attention uses one fused QKV projection (one matmul instead of three);
cross-attention projects the queries from the decoder and the keys/values
from the encoder output with one fused KV matmul. The projection is stored
as one ``(d_model + 2 h_kv d, d_model)`` weight (queries, keys, values), the
layout of ``torch.nn.MultiheadAttention.in_proj_weight`` when ``h_kv = h``.

What a module may receive beside its projections (composition, one option each):

* ``num_kv_heads``: grouped-query attention (Ainslie et al., 2023): ``h_kv``
  key/value heads shared by groups of ``h / h_kv`` query heads; the KV cache
  holds ``h_kv`` heads only.
* ``relative_positions`` (Shaw et al., 2018): tables added to every head's keys
  and values, with query ``i`` at position ``Tk - Tq + i``.
* ``rotary`` (RoPE, Su et al., 2021): queries and keys rotated by their
  positions before the cache stores the keys.
* ``alibi`` (Press et al., 2022): a per-head linear penalty ``-m_h |i - j|`` on
  the scores (for a causal layer only ``j <= i`` is visible, where this is the
  paper's ``-m_h (i - j)``).
* ``window`` (local attention): each query sees the keys of a sliding window
  (``attnkit.attention.local``; causal layers look back ``window - 1``
  keys, bidirectional ones ``window // 2`` each side) plus ``global_tokens``.

Positions come from the cache view when decoding (``LayerCache.query_positions``),
else ``0 .. T - 1``. Cross-attention has none of these position terms.

The score function is a string (``attnkit.attention.scores``): ``scaled_dot``
(the paper's, on the fused kernel), ``dot``, ``general`` (one ``(d, d)``
matrix shared by all heads) or ``additive`` (its weights shared by all heads).

Shapes: ``B`` batch, ``T`` query length, ``S`` key length, ``D`` d_model,
``h`` heads, ``h_kv`` key/value heads, ``d`` head dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.attention.cache import LayerCache
from attnkit.attention.functional import attend
from attnkit.attention.local import local_attention, window_extent
from attnkit.attention.scores import KEY_SCORES, Score, build_score
from attnkit.errors import ConfigError
from attnkit.positions.alibi import alibi_slopes
from attnkit.positions.relative import RelativePositions
from attnkit.positions.rotary import RotaryEmbedding, apply_rotary


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention (see the module doc for the options).

    Args:
        d_model: model width D.
        num_heads: number of heads h (D must be divisible by h).
        dropout: dropout on the attention weights.
        bias: use biases in the projections.
        num_kv_heads: key/value heads (divides h; default h).
        relative_positions, rotary, alibi, window, global_tokens: position
            and reach terms of a self-attention module.
        causal: this self-attention only ever looks back (decoders); it sets
            which way a local window reaches.
        score: ``"scaled_dot"`` (default), ``"dot"``, ``"general"`` or ``"additive"``.
    """

    slopes: Tensor | None

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
        alibi: bool = False,
        window: int | None = None,
        global_tokens: int = 0,
        causal: bool = False,
        score: str = "scaled_dot",
    ):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(
                f"num_heads: d_model={d_model} is not divisible by num_heads={num_heads}"
            )
        kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if kv_heads < 1 or num_heads % kv_heads != 0:
            raise ConfigError(f"num_kv_heads: {kv_heads} must divide num_heads={num_heads}")
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, kv_heads
        self.head_dim = d_model // num_heads
        self.kv_dim = kv_heads * self.head_dim
        self.dropout = dropout
        self.qkv_proj = nn.Linear(d_model, d_model + 2 * self.kv_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        if relative_positions is not None and relative_positions.key.size(1) != self.head_dim:
            raise ValueError(
                f"relative_positions: tables have size {relative_positions.key.size(1)}, "
                f"expected the head dim {self.head_dim}"
            )
        self.relative_positions = relative_positions
        self.rotary = rotary
        # Non-persistent: the slopes are a function of h, not weights to store.
        self.register_buffer(
            "slopes", alibi_slopes(num_heads)[:, None, None] if alibi else None, persistent=False
        )
        self.window, self.global_tokens, self.causal = window, global_tokens, causal
        if score not in KEY_SCORES:
            raise ConfigError(
                f"score: expected one of {', '.join(KEY_SCORES)} for multi-head attention; "
                f"got {score!r}"
            )
        positional = relative_positions is not None or alibi or rotary is not None
        if positional and score not in ("dot", "scaled_dot"):
            raise ConfigError(f"score: position terms need a dot-product score, got {score!r}")
        # None keeps the default on the fused kernel and the state-dict keys unchanged.
        self.score: Score | None = (
            None
            if score == "scaled_dot"
            else build_score(score, query_dim=self.head_dim, key_dim=self.head_dim)
        )

    def _heads(self, x: Tensor, heads: int) -> Tensor:
        """``(B, T, heads * d)`` -> ``(B, heads, T, d)``."""
        b, t, _ = x.shape
        return x.view(b, t, heads, self.head_dim).transpose(1, 2)

    def project_q(self, x: Tensor) -> Tensor:
        """Cross-attention queries of ``x`` ``(B, T, D)``, ``(B, h, T, d)``."""
        d = self.d_model
        bias = None if self.qkv_proj.bias is None else self.qkv_proj.bias[:d]
        return self._heads(F.linear(x, self.qkv_proj.weight[:d], bias), self.num_heads)

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``memory`` ``(B, S, D)``, ``(B, h_kv, S, d)`` each.

        Used for cross-attention, and by the decoder to compute them once per
        source sentence for the KV cache.
        """
        d = self.d_model
        bias = None if self.qkv_proj.bias is None else self.qkv_proj.bias[d:]
        k, v = F.linear(memory, self.qkv_proj.weight[d:], bias).split(self.kv_dim, dim=-1)
        return self._heads(k, self.num_kv_heads), self._heads(v, self.num_kv_heads)

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
                ``(k, v)`` ``(B, h_kv, S, d)`` (from ``project_kv``/the cache).
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
        if memory is not None:
            if self.relative_positions is not None:
                raise ValueError("memory: relative positions are for self-attention only")
            k, v = memory if isinstance(memory, tuple) else self.project_kv(memory)
            return self._cross(self.project_q(x), k, v, mask, need_weights)
        q_, k_, v_ = self.qkv_proj(x).split((d, self.kv_dim, self.kv_dim), dim=-1)
        q, k, v = (self._heads(q_, self.num_heads), self._heads(k_, self.num_kv_heads),
                   self._heads(v_, self.num_kv_heads))  # fmt: skip
        positions = None
        if self.rotary is not None or self.slopes is not None or self.window is not None:
            t = x.size(1)
            positions = (
                cache.query_positions(t) if cache is not None else torch.arange(t, device=x.device)
            )
        if self.rotary is not None:
            assert positions is not None
            q, k = apply_rotary(q, k, *self.rotary(positions))  # before the cache stores k
        if cache is not None:
            k, v = cache.update(k, v)
        return self._attend(q, k, v, mask, is_causal, need_weights, positions=positions)

    def _cross(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """Cross-attention of ``q`` ``(N, h, T, d)`` over ``k``/``v`` ``(B, h_kv, S, d)``.

        ``N = B * g``: beam search keeps one copy of a sentence's source keys
        for its ``g`` beams (``attnkit.models.state.DecoderState``). The beams'
        queries then become ``g * T`` query rows of that sentence: one attention
        call reads each source key once instead of ``g`` times (``mask``, if
        any, is per sentence: ``(B, 1, 1, S)``).
        """
        n, h, t, hd = q.shape
        g = n // k.size(0)
        if g == 1:
            return self._attend(q, k, v, mask, False, need_weights, positions=None)
        q = q.view(-1, g, h, t, hd).transpose(1, 2).reshape(-1, h, g * t, hd)
        out, weights = self._attend(q, k, v, mask, False, need_weights, positions=None)
        if weights is not None:  # (B, h, g T, S) -> (N, h, T, S)
            weights = weights.view(-1, h, g, t, weights.size(-1)).transpose(1, 2)
            weights = weights.reshape(n, h, t, -1)
        return out.view(n, t, self.d_model), weights

    def _attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        is_causal: bool,
        need_weights: bool,
        *,
        positions: Tensor | None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention of ``q`` ``(B, h, T, d)`` over ``k``/``v`` ``(B, h_kv, S, d)``, merged."""
        dropout = self.dropout if self.training else 0.0
        tq, tk = q.size(2), k.size(2)
        position = None
        if self.relative_positions is not None:
            # Keys are positions 0 .. Tk-1; queries the last Tq of them.
            position = self.relative_positions(tq, tk, device=q.device)
        score_bias = None
        if self.slopes is not None and positions is not None:
            keys = torch.arange(tk, device=q.device)
            distance = (positions[:, None] - keys[None, :]).abs().to(q.dtype)
            score_bias = -self.slopes.to(q.dtype) * distance  # (h, Tq, Tk)
        if self.window is not None and positions is not None:
            plain = mask is None or mask.size(-2) == 1  # no mask, or key padding only
            simple = self.score is None and position is None and score_bias is None
            if plain and simple and not need_weights and tq == tk:
                # A whole sequence: the chunked path never builds the (Tq, Tk) mask.
                out, weights = local_attention(
                    q, k, v, window=self.window, causal=self.causal or is_causal,
                    global_tokens=self.global_tokens or None, key_padding_mask=mask,
                    dropout_p=dropout,
                )  # fmt: skip
                return self._merge(out), weights
            band = self._band(positions, tk)
            mask = band if mask is None else mask & band
        out, weights = attend(
            q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout,
            need_weights=need_weights, position=position, score=self.score, bias=score_bias,
        )  # fmt: skip
        return self._merge(out), weights

    def _band(self, positions: Tensor, num_keys: int) -> Tensor:
        """``(Tq, Tk)`` local-attention mask for queries at ``positions`` over keys ``0 ..``."""
        assert self.window is not None
        left, right = window_extent(self.window, self.causal)
        keys = torch.arange(num_keys, device=positions.device)
        ahead = keys[None, :] - positions[:, None]  # > 0: a later key
        band = (ahead >= -left) & (ahead <= right)
        if self.global_tokens:
            band = band | (keys < self.global_tokens)[None, :]
            band = band | (positions < self.global_tokens)[:, None]
        return band

    def _merge(self, out: Tensor) -> Tensor:
        b, _, t, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_model))
