"""The SwiGLU feed-forward network (Shazeer, 2020, "GLU Variants Improve Transformer").

``FFN_SwiGLU(x) = (Swish(x W) * (x V)) W2`` (§2, eq. 6), with Swish_1 = SiLU.
Three matrices instead of two, so at equal parameter count the hidden width
shrinks by 2/3 (Llama: ``d_ff = 8/3 d`` rounded up to a multiple of 256;
SmolLM2-135M: ``d = 576``, ``d_ff = 1536``). Bias-free, as in Shazeer's
experiments and in Llama.

The same gated network with the tanh GELU instead of Swish is GEGLU (§2,
eq. 5 of that paper), T5 v1.1's "gated-gelu" FFN: pass ``activation``.

Names follow the Llama code (``gate_proj`` = W, ``up_proj`` = V,
``down_proj`` = W2), so GGUF/HF Llama weights load without renaming.

Shapes: ``(B, T, D) -> (B, T, D)`` through ``d_ff``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.roles import Roles, projection


class SwiGLU(nn.Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))``, ``act`` SiLU unless ``activation``."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        bias: bool = False,
        activation: Callable[[Tensor], Tensor] = F.silu,
    ) -> None:
        super().__init__()
        self.activation = activation
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    def roles(self) -> Roles:
        return Roles((projection("gate_proj", "ffn_gate"), projection("up_proj", "ffn_in"),
                      projection("down_proj", "ffn_out")))  # fmt: skip

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.activation(self.gate_proj(x)) * self.up_proj(x))
