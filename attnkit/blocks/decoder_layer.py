"""One decoder layer (§3.1): masked self-attention, cross-attention, FFN."""

from __future__ import annotations

from torch import Tensor, nn

from attnkit.attention.cache import KVCache
from attnkit.attention.multihead import MultiHeadAttention
from attnkit.blocks.feedforward import FeedForward
from attnkit.blocks.residual import Residual


class DecoderLayer(nn.Module):
    """Receives its sublayers (composition over flags); see ``build_decoder_layer``."""

    def __init__(
        self,
        self_attn: MultiHeadAttention,
        cross_attn: MultiHeadAttention,
        ffn: FeedForward,
        self_attn_residual: Residual,
        cross_attn_residual: Residual,
        ffn_residual: Residual,
    ):
        super().__init__()
        self.self_attn = self_attn
        self.cross_attn = cross_attn
        self.ffn = ffn
        self.self_attn_residual = self_attn_residual
        self.cross_attn_residual = cross_attn_residual
        self.ffn_residual = ffn_residual

    def forward(
        self,
        x: Tensor,
        memory: Tensor | tuple[Tensor, Tensor],
        *,
        self_mask: Tensor | None = None,
        is_causal: bool = True,
        memory_mask: Tensor | None = None,
        need_weights: bool = False,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Decode ``x`` ``(B, T, D)`` against ``memory`` ``(B, S, D)`` (or its cached ``(k, v)``).

        Returns ``(x, self-attention weights (B, h, T, T'), cross weights (B, h, T, S))``;
        the weights are ``None`` unless ``need_weights``.
        """
        x, self_w = self.self_attn_residual(
            x,
            lambda h: self.self_attn(
                h,
                mask=self_mask,
                is_causal=is_causal,
                need_weights=need_weights,
                cache=cache,
                layer=layer,
            ),
        )
        x, cross_w = self.cross_attn_residual(
            x, lambda h: self.cross_attn(h, memory, mask=memory_mask, need_weights=need_weights)
        )
        x, _ = self.ffn_residual(x, self.ffn)
        return x, self_w, cross_w
