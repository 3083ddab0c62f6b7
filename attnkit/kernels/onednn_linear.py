"""Linear layers on oneDNN's fp32 GEMM, for training on CPUs where MKL's sgemm is slow.

On this project's AMD EPYC machine, ``F.linear`` in fp32 goes to MKL's sgemm
at 130-190 GFLOP/s, while oneDNN (the library PyTorch already ships for its
bf16 and quantised kernels) does the same fp32 products 1.3-2.3x faster
(``bench/NOTES.md``). The result is fp32 all the way: the same products,
summed in another order (differences at float rounding, ~1e-6 relative).

``OneDNNLinear`` is an ``autograd.Function``: its forward and both backward
products (``grad_x = grad_y W``, ``grad_W = grad_y^T x``) are oneDNN calls
(``attnkit.kernels.torch_ops.onednn_linear``). ``use_onednn_linear(model)``
replaces every ``nn.Linear`` of a model by a ``OneDNNLinearModule`` holding the
same parameters (their names, any tying and an optimizer's references stay as
they are), so a trainer can switch it on for the CPU (``train.cpu_matmul``).
Inputs that oneDNN's fp32 path does not take (fp64, CUDA) fall back to ``F.linear``.

Shapes: ``x`` ``(..., K)``, ``weight`` ``(N, K)``, ``bias`` ``(N,)``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.kernels.torch_ops import onednn_available as available
from attnkit.kernels.torch_ops import onednn_linear as _dnnl

__all__ = [
    "OneDNNLinear",
    "OneDNNLinearModule",
    "available",
    "linear",
    "use_onednn_linear",
    "use_plain_linear",
]


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
        # Transposed views, not copies: oneDNN reads the strides (a LoRA step on SmolLM2
        # copied every frozen weight once per backward; bench/onednn_backward.py).
        if ctx.needs_input_grad[0]:
            grad_x = _dnnl(grad_y, weight.t(), None)
        if ctx.needs_input_grad[1]:
            grad_w = _dnnl(flat_g.t(), flat_x.t(), None)
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
    """An ``nn.Linear`` whose fp32 CPU products go through oneDNN.

    Made from an existing ``nn.Linear`` and holding its very parameters (not
    copies): nothing is allocated or drawn from the random generator.
    """

    def __init__(self, linear: nn.Linear) -> None:
        nn.Module.__init__(self)  # not nn.Linear's: it would allocate and initialise weights
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.register_parameter("bias", linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


def use_onednn_linear(model: nn.Module) -> int:
    """Replace every plain ``nn.Linear`` of ``model`` by a ``OneDNNLinearModule``; returns how many.

    The replacements hold the same parameters, so state-dict names, weight
    tying and an optimizer built before stay valid; a module shared by two
    parents is replaced by one module in both.
    """
    replaced: dict[int, OneDNNLinearModule] = {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                if id(child) not in replaced:
                    replaced[id(child)] = OneDNNLinearModule(child)
                setattr(parent, name, replaced[id(child)])
    return len(replaced)


def use_plain_linear(model: nn.Module) -> int:
    """Undo ``use_onednn_linear``: plain ``nn.Linear`` layers holding the same parameters."""
    replaced: dict[int, nn.Linear] = {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is OneDNNLinearModule:
                if id(child) not in replaced:
                    plain = nn.Linear.__new__(nn.Linear)
                    nn.Module.__init__(plain)  # nothing allocated or drawn
                    plain.in_features, plain.out_features = child.in_features, child.out_features
                    plain.weight = child.weight
                    plain.register_parameter("bias", child.bias)
                    replaced[id(child)] = plain
                setattr(parent, name, replaced[id(child)])
    return len(replaced)
