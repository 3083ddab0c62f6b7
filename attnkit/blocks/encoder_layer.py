"""One encoder layer (§3.1): self-attention, then the FFN, each in a residual."""

from __future__ import annotations

from torch import Tensor, nn

from attnkit.blocks.moe import MoEAux
from attnkit.blocks.residual import Residual


class EncoderLayer(nn.Module):
    """Receives its sublayers (composition over flags); see ``build_encoder_layer``."""

    def __init__(
        self,
        self_attn: nn.Module,
        ffn: nn.Module,
        self_attn_residual: Residual,
        ffn_residual: Residual,
    ):
        super().__init__()
        self.self_attn = self_attn
        self.ffn = ffn
        self.self_attn_residual = self_attn_residual
        self.ffn_residual = ffn_residual

    def forward(
        self, x: Tensor, *, mask: Tensor | None = None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, MoEAux | None]:
        """``x`` ``(B, S, D)``, ``mask`` ``(B, 1, 1, S)`` -> ``(B, S, D)``.

        Returns ``(x, weights, aux)``: the weights ``(B, h, S, S)`` only when
        ``need_weights``; ``aux`` is what the FFN reports beside its output
        (a mixture of experts' routing, ``MoEAux``), else ``None``.
        """
        x, weights = self.self_attn_residual(
            x, lambda h: self.self_attn(h, mask=mask, need_weights=need_weights)
        )
        x, aux = self.ffn_residual(x, self.ffn)
        return x, weights, aux
