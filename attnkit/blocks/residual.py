"""The residual connection around every sublayer, with LayerNorm placed by name.

* ``"post"`` (the paper, §5.4): ``LayerNorm(x + Dropout(Sublayer(x)))``
* ``"pre"``: ``x + Dropout(Sublayer(LayerNorm(x)))``; the stack then ends
  with a final LayerNorm (see ``stacks.py``).

This is the one place that knows the difference, so layers never branch on it.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from attnkit.blocks.norms import build_norm

NORM_POSITIONS = ("post", "pre")


class Residual(nn.Module):
    """Wraps one sublayer: dropout on its output, residual add, LayerNorm."""

    def __init__(
        self,
        d_model: int,
        dropout: float,
        norm_position: str,
        eps: float = 1e-5,
        *,
        norm: str = "layernorm",
    ):
        super().__init__()
        if norm_position not in NORM_POSITIONS:
            raise ValueError(
                f"norm_position: expected one of {NORM_POSITIONS}, got {norm_position!r}"
            )
        self.pre_norm = norm_position == "pre"
        self.norm = build_norm(norm, d_model, eps)  # LayerNorm, or RMSNorm (Llama)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, sublayer: Callable[[Tensor], Tensor | tuple[Tensor, object]]
    ) -> tuple[Tensor, object]:
        """Apply ``sublayer`` to ``x`` ``(B, T, D)``; returns ``(y, extra)``.

        ``extra`` is whatever the sublayer returned beside its output (the
        attention weights), or ``None``.
        """
        out = sublayer(self.norm(x) if self.pre_norm else x)
        out, extra = out if isinstance(out, tuple) else (out, None)
        y = x + self.dropout(out)
        return (y if self.pre_norm else self.norm(y)), extra
