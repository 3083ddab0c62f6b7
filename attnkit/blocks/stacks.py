"""Stacks of N layers (§3.1), with a final LayerNorm when the layers are pre-LN.

Pre-LN layers leave the residual stream un-normalised, so the stack must end
with a LayerNorm; post-LN layers already end with one (the paper has no
extra norm, unlike ``torch.nn.Transformer``, which always adds one).

Every stack returns a ``StackOutput``: the hidden states, the attention maps
(on request), and ``aux``, what the layers' FFNs reported beside their
outputs (a mixture of experts' routing losses; empty for dense FFNs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from torch import Tensor, nn

from attnkit.attention.cache import DecoderCache
from attnkit.attention.masks import Mask
from attnkit.blocks.decoder_layer import DecoderLayer
from attnkit.blocks.encoder_layer import EncoderLayer
from attnkit.blocks.moe import MoEAux


@dataclass
class StackOutput:
    """What a stack returns.

    Attributes:
        hidden: ``(B, T, D)`` after the last layer (and the final norm).
        attentions: per layer ``(B, h, T, T')`` self-attention, only on request.
        cross_attentions: per layer ``(B, h, T, S)`` (decoders), only on request.
        aux: each MoE layer's ``MoEAux`` (empty without mixtures).
    """

    hidden: Tensor
    attentions: list[Tensor] | None = None
    cross_attentions: list[Tensor] | None = None
    aux: list[MoEAux] = field(default_factory=list)


class Encoder(nn.Module):
    def __init__(self, layers: Sequence[EncoderLayer], final_norm: nn.Module | None = None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm

    def forward(
        self, x: Tensor, *, mask: Tensor | None = None, need_weights: bool = False
    ) -> StackOutput:
        """``x`` ``(B, S, D)`` -> ``(B, S, D)`` and per-layer weights ``(B, h, S, S)``."""
        weights, auxes = [], []
        for layer in self.layers:
            x, w, aux = layer(x, mask=mask, need_weights=need_weights)
            weights.append(w)
            auxes.append(aux)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return StackOutput(x, weights if need_weights else None, None, _present(auxes))


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
        memory_mask: Mask | None = None,
        need_weights: bool = False,
        cache: DecoderCache | None = None,
    ) -> StackOutput:
        """``x`` ``(B, T, D)`` against ``memory`` ``(B, S, D)`` -> ``(B, T, D)``.

        With a ``cache``, ``memory`` may be ``None``: each layer's
        cross-attention keys/values come from its cache view, and new
        self-attention keys/values go into it (the caller advances the cache).
        """
        views = cache.layers() if cache is not None else [None] * len(self.layers)
        self_ws, cross_ws, auxes = [], [], []
        for layer, view in zip(self.layers, views, strict=True):
            mem: Tensor | tuple[Tensor, Tensor] | None = memory
            if mem is None:
                if view is None or view.cross is None:
                    raise ValueError("memory: needed unless the cache holds cross-attention K/V")
                mem = view.cross
            x, sw, cw, aux = layer(
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
            auxes.append(aux)
        if self.final_norm is not None:
            x = self.final_norm(x)
        if not need_weights:
            return StackOutput(x, aux=_present(auxes))
        return StackOutput(x, self_ws, cross_ws, _present(auxes))


def run_causal_layers(
    layers: Iterable[nn.Module],
    x: Tensor,
    *,
    final_norm: nn.Module | None = None,
    need_weights: bool = False,
    cache: DecoderCache | None = None,
) -> StackOutput:
    """A decoder-only stack: ``x`` ``(B, T, D)`` through ``layers`` (and the final norm).

    With a ``cache`` each layer gets its view; its ``self_mask`` (a static
    cache's validity mask) replaces the causal mask when it has one.
    """
    self_mask = cache.self_mask(x.size(1)) if cache is not None else None
    layers = list(layers)
    views = cache.layers() if cache is not None else [None] * len(layers)
    weights, auxes = [], []
    for layer, view in zip(layers, views, strict=True):
        x, w, aux = layer(x, self_mask=self_mask, need_weights=need_weights, cache=view)
        weights.append(w)
        auxes.append(aux)
    if final_norm is not None:
        x = final_norm(x)
    return StackOutput(x, weights if need_weights else None, None, _present(auxes))


def _present(auxes: list[MoEAux | None]) -> list[MoEAux]:
    return [a for a in auxes if a is not None]
