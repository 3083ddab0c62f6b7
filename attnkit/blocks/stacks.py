"""Stacks of N layers (§3.1), with a final LayerNorm when the layers are pre-LN.

Pre-LN layers leave the residual stream un-normalised, so the stack must end
with a LayerNorm; post-LN layers already end with one (the paper has no
extra norm, unlike ``torch.nn.Transformer``, which always adds one).
"""

from __future__ import annotations

from torch import Tensor, nn

from attnkit.attention.cache import KVCache
from attnkit.blocks.decoder_layer import DecoderLayer
from attnkit.blocks.encoder_layer import EncoderLayer


class Encoder(nn.Module):
    def __init__(self, layers: list[EncoderLayer], final_norm: nn.LayerNorm | None = None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm

    def forward(
        self, x: Tensor, *, mask: Tensor | None = None, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor] | None]:
        """``x`` ``(B, S, D)`` -> ``(B, S, D)`` and per-layer weights ``(B, h, S, S)``."""
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask=mask, need_weights=need_weights)
            weights.append(w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, (weights if need_weights else None)


class Decoder(nn.Module):
    def __init__(self, layers: list[DecoderLayer], final_norm: nn.LayerNorm | None = None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        *,
        self_mask: Tensor | None = None,
        is_causal: bool = True,
        memory_mask: Tensor | None = None,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ) -> tuple[Tensor, list[Tensor] | None, list[Tensor] | None]:
        """``x`` ``(B, T, D)`` against ``memory`` ``(B, S, D)`` -> ``(B, T, D)``.

        With a ``cache``, ``memory`` may be ``None``: the cross-attention keys
        and values come from the cache, and new self-attention keys/values are
        appended to it (the caller advances the cache afterwards).
        """
        self_ws, cross_ws = [], []
        for i, layer in enumerate(self.layers):
            mem = cache.cross(i) if (cache is not None and memory is None) else memory
            x, sw, cw = layer(
                x,
                mem,
                self_mask=self_mask,
                is_causal=is_causal,
                memory_mask=memory_mask,
                need_weights=need_weights,
                cache=cache,
                layer=i,
            )
            self_ws.append(sw)
            cross_ws.append(cw)
        if self.final_norm is not None:
            x = self.final_norm(x)
        if not need_weights:
            return x, None, None
        return x, self_ws, cross_ws
