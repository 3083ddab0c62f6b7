"""Linear layers on oneDNN's fp32 GEMM, for training on CPUs where MKL's sgemm is slow.

On this project's AMD EPYC machine, ``F.linear`` in fp32 goes to MKL's sgemm
at 130-190 GFLOP/s, while oneDNN (the library PyTorch already ships for its
bf16 and quantised kernels) does the same fp32 products 1.3-2.3x faster
(``bench/NOTES.md``). The result is fp32 all the way: the same products,
summed in another order (differences at float rounding, ~1e-6 relative).

``OneDNNLinear`` is an ``autograd.Function``: its forward and both backward
products (``grad_x = grad_y W``, ``grad_W = grad_y^T x``) are oneDNN calls
(``torch.ops.mkldnn._linear_pointwise``). ``use_onednn_linear(model)`` turns
every ``nn.Linear`` of a model into ``OneDNNLinearModule`` in place (the
parameters, their names and any tying stay as they are), so a trainer can
switch it on for the CPU (``train.cpu_matmul``). Inputs that oneDNN's fp32
path does not take (fp64, CUDA) fall back to ``F.linear``.

Shapes: ``x`` ``(..., K)``, ``weight`` ``(N, K)``, ``bias`` ``(N,)``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def available() -> bool:
    """Whether this torch build has oneDNN's linear op."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _dnnl(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class OneDNNLinear(torch.autograd.Function):
    """``x W^T + b`` with oneDNN for the forward and both backward products."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _dnnl(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor) -> tuple[Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        flat_x = x.reshape(-1, x.size(-1))
        flat_g = grad_y.reshape(-1, grad_y.size(-1))
        if ctx.needs_input_grad[0]:
            grad_x = _dnnl(grad_y, weight.t().contiguous(), None)
        if ctx.needs_input_grad[1]:
            grad_w = _dnnl(flat_g.t().contiguous(), flat_x.t().contiguous(), None)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = flat_g.sum(0)
        return grad_x, grad_w, grad_b


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear`` through oneDNN when the inputs are fp32 on the CPU, else ``F.linear``."""
    fits = x.dtype == weight.dtype == torch.float32 and x.device.type == "cpu"
    if fits and not torch.is_autocast_enabled("cpu"):
        return OneDNNLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


class OneDNNLinearModule(nn.Linear):
    """An ``nn.Linear`` whose fp32 CPU products go through oneDNN (same parameters)."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


def use_onednn_linear(model: nn.Module) -> int:
    """Switch every plain ``nn.Linear`` of ``model`` to oneDNN, in place; returns how many.

    The modules keep their parameters (and so their state-dict names and any
    weight tying); only ``forward`` changes.
    """
    count = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = OneDNNLinearModule
            count += 1
    return count
