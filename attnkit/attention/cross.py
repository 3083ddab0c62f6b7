"""Cross-attention (§3.2.3): a decoder's queries over the encoder output.

Queries come from the decoder, keys and values from the encoder output (the
"memory"): two inputs, so two projections, each a module of its own:

* ``q_proj`` ``(D -> D)`` on the decoder stream, at every step;
* ``kv_proj`` ``(D -> 2 h_kv d)`` on the memory, keys then values, one matmul
  computed once per source sentence (``project_kv``; the decoder's cache keeps
  the result for every step).

(Self-attention, whose queries, keys and values share one input, keeps one
fused ``qkv_proj``: ``attnkit.attention.multihead``.) Being modules, the
projections can be replaced whole: packed or quantised linears
(``attnkit.quantize``), adapters.

Checkpoints written before this split hold one fused
``cross_attn.qkv_proj``; ``attnkit.models.checkpoint_keys`` upgrades them
where checkpoints are loaded.

Beam search keeps one copy of a sentence's keys/values for its ``g`` beams;
the beams' queries then become ``g T`` query rows of one attention call.

Shapes: ``B`` sentences, ``N = B g`` decoder rows, ``T`` target length, ``S``
source length, ``D`` d_model, ``h`` heads, ``h_kv`` key/value heads, ``d`` head dim.
"""

from __future__ import annotations

from torch import Tensor, nn

from attnkit.attention.backends import REFERENCE, AttentionBackend
from attnkit.attention.heads import (
    check_heads,
    check_key_dim,
    head_score,
    merge_heads,
    pad_keys,
    split_heads,
)
from attnkit.attention.masks import Mask
from attnkit.errors import ConfigError
from attnkit.roles import Projection, Roles, linears_as, projection


class CrossAttention(nn.Module):
    """Multi-head attention of a decoder over the encoder output (see the module doc).

    Args:
        d_model: model width D (divisible by ``num_heads``).
        num_heads: query heads h.
        dropout: dropout on the attention weights.
        bias: biases in the projections.
        num_kv_heads: key/value heads (divides h; default h).
        score: ``"scaled_dot"`` (default), ``"dot"``, ``"general"`` or ``"additive"``.
        backend: how attention is computed (default ``REFERENCE``; see
            ``attnkit.attention.backends``).
        key_dim: ``d_k`` of queries and keys, below ``D / h`` (padded as in
            ``MultiHeadAttention``); default ``D / h``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        num_kv_heads: int | None = None,
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
        if self.key_dim != self.head_dim and score != "scaled_dot":
            raise ConfigError("key_dim: a key size below d_model / num_heads needs the scaled dot")
        self.kv_dim = kv_heads * self.head_dim
        self.kv_sizes = (kv_heads * self.key_dim, self.kv_dim)  # keys, values
        self.dropout = dropout
        # Registered in this order (q, kv, out): the parameters of a fused checkpoint's
        # qkv_proj, split, then out_proj, so an old optimizer state lines up.
        self.q_proj = nn.Linear(d_model, num_heads * self.key_dim, bias=bias)
        self.kv_proj = nn.Linear(d_model, sum(self.kv_sizes), bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.score = head_score(score, self.head_dim)
        self.backend = backend

    def roles(self) -> Roles:
        """``q_proj``: ``q``; ``kv_proj``: key rows then value rows; ``out_proj``: ``o``."""
        return Roles((
            projection("q_proj", "q"),
            Projection("kv_proj", ("k", "v"), self.kv_sizes),
            projection("out_proj", "o"),
            *linears_as("score", self.score, "score"),
        ))  # fmt: skip

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``memory`` ``(B, S, D)``, ``(B, h_kv, S, d)`` each."""
        k, v = self.kv_proj(memory).split(self.kv_sizes, dim=-1)
        k = pad_keys(split_heads(k, self.num_kv_heads, self.key_dim), self.head_dim)
        return k, split_heads(v, self.num_kv_heads, self.head_dim)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | tuple[Tensor, Tensor],
        *,
        mask: Mask | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` ``(N, T, D)`` to ``memory``.

        Args:
            memory: the encoder output ``(B, S, D)``, or its projected
                ``(k, v)`` ``(B, h_kv, S, d)`` (``project_kv``, the cache). ``N``
                is ``B`` or, in beam search, ``B g``: row ``i`` reads sentence ``i // g``.
            mask: bool, broadcastable to ``(B, h, T, S)`` (per sentence), True =
                may attend; or a ``PreparedMask`` of one.
            need_weights: also return per-head weights ``(N, h, T, S)``.

        Returns:
            ``(out (N, T, D), weights or None)``.
        """
        k, v = memory if isinstance(memory, tuple) else self.project_kv(memory)
        q = pad_keys(split_heads(self.q_proj(x), self.num_heads, self.key_dim), self.head_dim)
        n, h, t, hd = q.shape
        g = n // k.size(0)
        if g > 1:  # the g beams of a sentence: g T query rows over its one copy of k, v
            q = q.view(-1, g, h, t, hd).transpose(1, 2).reshape(-1, h, g * t, hd)
        out, weights = self.backend(
            q, k, v, mask=mask, dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights, score=self.score, scale=self.key_scale,
        )  # fmt: skip
        merged = merge_heads(out)  # (B, g T, D): a sentence's beams are consecutive rows
        if g > 1:
            merged = merged.view(n, t, self.d_model)
            if weights is not None:  # (B, h, g T, S) -> (N, h, T, S)
                weights = weights.view(-1, h, g, t, weights.size(-1)).transpose(1, 2)
                weights = weights.reshape(n, h, t, -1)
        return self.out_proj(merged), weights

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"backend={self.backend!r}"
        )
