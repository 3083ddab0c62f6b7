"""Normalisation layers by name: LayerNorm (Ba et al., 2016; the paper's) and RMSNorm.

RMSNorm (Zhang & Sennrich, 2019, "Root Mean Square Layer Normalization")
drops LayerNorm's mean-centring and bias: ``y = w * x / sqrt(mean(x^2) + eps)``.
It re-scales like LayerNorm at lower cost, and is what Llama and its
descendants use.

Like Llama, the statistics are computed in float32 and the normalised
activations cast back to the input dtype *before* the weight multiplies
them: in bf16/fp16 the mean of squares would otherwise lose most of its
precision. The same order of operations makes the result bit-identical to
Hugging Face's ``LlamaRMSNorm``.

Shapes: ``(..., d)`` in, ``(..., d)`` out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.errors import ConfigError
from attnkit.roles import Roles

NORMS = ("layernorm", "rmsnorm")


class RMSNorm(nn.Module):
    """``w * x / sqrt(mean(x^2, -1) + eps)``: a weight, no bias, no centring."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        if eps <= 0:
            raise ValueError(f"eps: must be > 0, got {eps}")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def roles(self) -> Roles:
        return Roles(parameters={"weight": "norm"})

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            # ATen's rms_norm: on the CPU the formula below bit for bit (tests/blocks/
            # test_norms.py), one operator instead of nine, which a batch-1 decode step
            # feels (SmolLM2: 61 norms a token); a GPU may round its reduction otherwise
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        dtype = x.dtype
        x = x.to(torch.promote_types(dtype, torch.float32))  # half in fp32; fp64 stays
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.size(0)}, eps={self.eps}"


def build_norm(kind: str, d: int, eps: float = 1e-5) -> nn.Module:
    """A norm of width ``d`` by name: ``"layernorm"`` (weight and bias) or ``"rmsnorm"``."""
    if kind == "layernorm":
        return nn.LayerNorm(d, eps=eps)
    if kind == "rmsnorm":
        return RMSNorm(d, eps=eps)
    raise ConfigError(f"norm: expected one of {', '.join(NORMS)}, got {kind!r}")
