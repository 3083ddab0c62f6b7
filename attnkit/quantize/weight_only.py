"""Weight-only int8 linears for the CPU: int8 weights, bf16 activations (``"int8w"``).

``Int8Linear`` (``attnkit.quantize.linear``) quantises the activations too, one
scale per call; Llama-type models have activation outliers that one scale
cannot hold (SmolLM2's logits come out 20-80% off). Here only the weights are
int8 (symmetric, one scale per output row, as ``quantize_rows``); the
activations stay bf16 and the product is PyTorch's
``aten._weight_int8pack_mm`` (dequantise-and-multiply in one CPU kernel), so
the error is the bf16 path's plus the weights' rounding.

Measured at SmolLM2's decode shapes (one row; ``bench/NOTES.md``):
``_weight_int8pack_mm`` with bf16 input ran 1.5x as fast as the oneDNN bf16
GEMM and 0.3-0.7x as fast as fbgemm's dynamic int8; with fp32 input it was
several times slower than either, hence bf16 activations. It does not scale
with rows: on batched translation int8w is slower than fp32 (docs/lab/results-history.md).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnkit.kernels.torch_ops import check_activation, int8pack_mm
from attnkit.quantize.linear import quantize_rows


class Int8WeightOnlyLinear(nn.Module):
    """``y = act(x W^T + b)``: int8 per-row weights, bf16 activations, fp32 in and out.

    Args:
        weight: ``(N, K)`` float weight, quantised per output row.
        bias: ``(N,)`` or ``None`` (kept in fp32, added after the product).
        activation: ``"none"`` or ``"relu"``.

    ``state_dict`` holds ``weight_int8`` ``(N, K)`` and ``weight_scale``
    ``(N,)`` (as ``Int8Linear``'s), so the two load each other's entries.
    """

    weight_int8: Tensor
    weight_scale: Tensor
    bias: Tensor | None

    def __init__(
        self, weight: Tensor, bias: Tensor | None = None, *, activation: str = "none"
    ) -> None:
        super().__init__()
        check_activation(activation)
        self.activation = activation
        self.out_features, self.in_features = weight.shape
        q, scale = quantize_rows(weight)
        self.register_buffer("weight_int8", q.contiguous())
        self.register_buffer("weight_scale", scale.float())
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        self._scale_bf16 = scale.to(torch.bfloat16)

    @classmethod
    def from_linear(cls, linear: nn.Linear, **kwargs: Any) -> Int8WeightOnlyLinear:
        return cls(linear.weight, linear.bias, **kwargs)

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args)
        self._scale_bf16 = self.weight_scale.to(torch.bfloat16)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``(..., K)`` -> ``(..., N)`` fp32."""
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        y = int8pack_mm(rows, self.weight_int8, self._scale_bf16)
        y = y.float().view(*x.shape[:-1], self.out_features)
        if self.bias is not None:
            y = y + self.bias
        return torch.relu(y) if self.activation == "relu" else y

    @property
    def weight(self) -> Tensor:
        """The dequantised float weight (a copy; not used by ``forward``)."""
        return self.weight_int8.float() * self.weight_scale[:, None]

    def nbytes(self) -> int:
        """Resident bytes: int8 weight, fp32 and bf16 scales, fp32 bias."""
        n = self.out_features * (self.in_features + 6)
        return n + (4 * self.out_features if self.bias is not None else 0)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"int8 per-row weights, bf16 activations, activation={self.activation}"
        )
