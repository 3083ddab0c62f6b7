"""Decoder layers (§3.1): masked self-attention, cross-attention, FFN; and the
decoder-only layer, which has no cross-attention.

Both receive their sublayers (composition over flags; ``attnkit.models.builders``
assembles them from a config) and, when decoding, their own ``LayerCache``
view of the decoder's cache.
"""

from __future__ import annotations

from torch import Tensor, nn

from attnkit.attention.cache import LayerCache
from attnkit.attention.cross import CrossAttention
from attnkit.attention.masks import Mask
from attnkit.blocks.encoder_layer import EncoderLayer
from attnkit.blocks.moe import MoEAux
from attnkit.blocks.residual import Residual


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention and the FFN, each in a ``Residual``."""

    def __init__(
        self,
        self_attn: nn.Module,
        cross_attn: CrossAttention,
        ffn: nn.Module,
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
        memory_mask: Mask | None = None,
        need_weights: bool = False,
        cache: LayerCache | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None, MoEAux | None]:
        """Decode ``x`` ``(B, T, D)`` against ``memory`` ``(B, S, D)`` (or its cached ``(k, v)``).

        Returns ``(x, self-attention weights (B, h, T, T'), cross weights (B, h, T, S),
        aux)``; the weights are ``None`` unless ``need_weights``, ``aux`` is the
        FFN's report (``MoEAux``) or ``None``.
        """
        x, self_w = self.self_attn_residual(
            x,
            lambda h: self.self_attn(
                h, mask=self_mask, is_causal=is_causal, need_weights=need_weights, cache=cache
            ),
        )
        x, cross_w = self.cross_attn_residual(
            x, lambda h: self.cross_attn(h, memory, mask=memory_mask, need_weights=need_weights)
        )
        x, aux = self.ffn_residual(x, self.ffn)
        return x, self_w, cross_w, aux


class CausalLayer(EncoderLayer):
    """Masked self-attention then the FFN (a decoder layer without cross-attention).

    The same sublayers as an encoder layer; only the attention is causal and cached.
    """

    def forward(  # type: ignore[override]  # a cache instead of a padding mask
        self,
        x: Tensor,
        *,
        self_mask: Tensor | None = None,
        need_weights: bool = False,
        cache: LayerCache | None = None,
    ) -> tuple[Tensor, Tensor | None, MoEAux | None]:
        """``x`` ``(B, T, D)`` -> ``(B, T, D)``; weights ``(B, h, T, T')`` on request, and
        the FFN's report (``MoEAux``) or ``None``.

        With a ``cache``, ``x`` holds the newest positions; their keys/values
        are stored in it and attention covers every cached position.
        ``self_mask`` (from the cache) replaces the causal mask when given.
        """
        x, weights = self.self_attn_residual(
            x,
            lambda h: self.self_attn(
                h,
                mask=self_mask,
                is_causal=self_mask is None,
                need_weights=need_weights,
                cache=cache,
            ),
        )
        x, aux = self.ffn_residual(x, self.ffn)
        return x, weights, aux
