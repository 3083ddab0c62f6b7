"""Typed model outputs. Attention maps live here, on request, never on modules."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from attnkit.blocks.moe import MoEAux


@dataclass
class Seq2SeqOutput:
    """What ``EncoderDecoder.forward`` returns.

    Attributes:
        logits: ``(B, T, V)`` next-token scores (``None`` if not computed).
        hidden: ``(B, T, D)`` decoder output before the output projection.
        encoder_attentions: per layer ``(B, h, S, S)``, only on request.
        decoder_self_attentions: per layer ``(B, h, T, T)``, only on request.
        cross_attentions: per layer ``(B, h, T, S)``, only on request.
        moe: the mixture-of-experts layers' routing losses and utilisation
            (``combine_aux``), or ``None`` without MoE layers.
    """

    logits: Tensor | None
    hidden: Tensor
    encoder_attentions: list[Tensor] | None = None
    decoder_self_attentions: list[Tensor] | None = None
    cross_attentions: list[Tensor] | None = None
    moe: MoEAux | None = None
