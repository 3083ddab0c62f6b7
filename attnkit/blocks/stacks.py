"""Stacks of N layers (§3.1), with a final LayerNorm when the layers are pre-LN.

Pre-LN layers leave the residual stream un-normalised, so the stack must end
with a LayerNorm; post-LN layers already end with one (the paper has no
extra norm, unlike ``torch.nn.Transformer``, which always adds one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from torch import Tensor, nn

from attnkit.attention.cache import DecoderCache
from attnkit.blocks.decoder_layer import DecoderLayer
from attnkit.blocks.encoder_layer import EncoderLayer


class Encoder(nn.Module):
    def __init__(self, layers: Sequence[EncoderLayer], final_norm: nn.Module | None = None):
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
    def __init__(self, layers: Sequence[DecoderLayer], final_norm: nn.Module | None = None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm

    def decoder_layers(self) -> list[DecoderLayer]:
        """The layers, typed (``nn.ModuleList`` items are plain modules to a type checker)."""
        return [layer for layer in self.layers if isinstance(layer, DecoderLayer)]

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        *,
        self_mask: Tensor | None = None,
        is_causal: bool = True,
        memory_mask: Tensor | None = None,
        need_weights: bool = False,
        cache: DecoderCache | None = None,
    ) -> tuple[Tensor, list[Tensor] | None, list[Tensor] | None]:
        """``x`` ``(B, T, D)`` against ``memory`` ``(B, S, D)`` -> ``(B, T, D)``.

        With a ``cache``, ``memory`` may be ``None``: each layer's
        cross-attention keys/values come from its cache view, and new
        self-attention keys/values go into it (the caller advances the cache).
        """
        views = cache.layers() if cache is not None else [None] * len(self.layers)
        self_ws, cross_ws = [], []
        for layer, view in zip(self.layers, views, strict=True):
            mem: Tensor | tuple[Tensor, Tensor] | None = memory
            if mem is None:
                if view is None or view.cross is None:
                    raise ValueError("memory: needed unless the cache holds cross-attention K/V")
                mem = view.cross
            x, sw, cw = layer(
                x,
                mem,
                self_mask=self_mask,
                is_causal=is_causal,
                memory_mask=memory_mask,
                need_weights=need_weights,
                cache=view,
            )
            self_ws.append(sw)
            cross_ws.append(cw)
        if self.final_norm is not None:
            x = self.final_norm(x)
        if not need_weights:
            return x, None, None
        return x, self_ws, cross_ws


def run_causal_layers(
    layers: Iterable[nn.Module],
    x: Tensor,
    *,
    final_norm: nn.Module | None = None,
    need_weights: bool = False,
    cache: DecoderCache | None = None,
) -> tuple[Tensor, list[Tensor] | None]:
    """A decoder-only stack: ``x`` ``(B, T, D)`` through ``layers`` (and the final norm).

    With a ``cache`` each layer gets its view; its ``self_mask`` (a static
    cache's validity mask) replaces the causal mask when it has one.
    """
    self_mask = cache.self_mask(x.size(1)) if cache is not None else None
    layers = list(layers)
    views = cache.layers() if cache is not None else [None] * len(layers)
    weights = []
    for layer, view in zip(layers, views, strict=True):
        x, w = layer(x, self_mask=self_mask, need_weights=need_weights, cache=view)
        weights.append(w)
    if final_norm is not None:
        x = final_norm(x)
    return x, (weights if need_weights else None)
