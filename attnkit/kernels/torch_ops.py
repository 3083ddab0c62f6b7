"""The one wrapper around the private and legacy torch ops behind attnkit's CPU linears.

* oneDNN (``torch.ops.mkldnn``): ``_reorder_linear_weight`` packs a weight into
  oneDNN's blocked layout, ``_linear_pointwise`` multiplies (packed or plain
  weight, an optional fused ReLU). What inductor's CPU freezing uses; private.
* fbgemm (``torch.ops.quantized``): ``linear_prepack`` packs a per-channel
  quantised int8 weight (built from a per-channel quantized tensor, a
  deprecated tensor kind in torch 2.13), ``linear_dynamic`` /
  ``linear_relu_dynamic`` multiply with activations quantised per call. What
  the deprecated ``quantize_dynamic`` calls.
* ``aten._weight_int8pack_mm``: int8 weights with one scale per row, bf16
  activations, dequantise-and-multiply in one kernel; private.
* ``aten._convert_weight_to_int4pack_for_cpu`` / ``aten._weight_int4pack_mm_for_cpu``:
  4-bit weights in groups along K, one bf16 scale and zero per group and row
  (``w = (q - 8) * scale + zero``, ``q`` in 0..15), bf16 activations; private.

A packed weight the compiler cannot trace is held as a ``KernelWeight``, and
inside ``torch.compile`` its linear is a custom op (``attnkit::...``) naming it
by a handle; eager calls go to the kernels directly.

``attnkit.quantize`` (``PackedLinear``, ``Int8Linear``,
``Int8WeightOnlyLinear``, ``Int4Linear``) and ``attnkit.kernels.onednn_linear`` call them only
through here, so a torch release that renames or drops one needs one change.

Shapes: ``x`` ``(..., K)``, weights ``(N, K)``, biases and scales ``(N,)``.
"""

from __future__ import annotations

import copy
import itertools
import warnings
import weakref
from typing import Any

import torch
from torch import Tensor

ACTIVATIONS = ("none", "relu")
"""What the packed GEMMs can fuse into their output."""


def check_activation(activation: str) -> None:
    """``ValueError`` naming ``activation`` unless it is one of ``ACTIVATIONS``."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {ACTIVATIONS}, got {activation!r}")


# -- weights the compiler cannot trace ------------------------------------------------


class KernelWeight:
    """A weight only its kernel reads (fbgemm's packed int8 object), and the handle
    that names it to ``torch.compile``.

    The compiler cannot trace such a weight (a TorchScript object without a fake
    for its tracer), so a compiled step calls a custom op
    (``attnkit::fbgemm_linear_dynamic``) that takes the weight's ``handle`` (an int,
    a constant of the compiled graph) and finds the weight in a registry of the
    live ones. Eager calls skip the custom op (its dispatch into Python costs
    ~10 us a call). A copy registers anew.
    """

    def __init__(self, value: Any, out_features: int) -> None:
        self.value, self.out_features = value, out_features
        self.handle = next(_HANDLES)
        _LIVE[self.handle] = self

    def __deepcopy__(self, memo: dict[int, object]) -> KernelWeight:
        return KernelWeight(copy.deepcopy(self.value, memo), self.out_features)

    def __reduce__(self) -> tuple[object, tuple[object, int]]:
        return KernelWeight, (self.value, self.out_features)


_HANDLES = itertools.count()
_LIVE: weakref.WeakValueDictionary[int, KernelWeight] = weakref.WeakValueDictionary()


def _live(handle: int) -> Any:
    weight = _LIVE.get(handle)
    if weight is None:
        raise RuntimeError(f"kernel weight {handle}: no longer alive (a stale compiled step)")
    return weight.value


# -- oneDNN ------------------------------------------------------------------------------


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's linear op."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_pack(weight: Tensor, rows_hint: int) -> Tensor:
    """``weight`` ``(N, K)`` (CPU, contiguous; fp32 or bf16) in oneDNN's blocked layout,
    tuned for products with about ``rows_hint`` rows."""
    packed: Tensor = torch.ops.mkldnn._reorder_linear_weight(weight, rows_hint)
    return packed


def onednn_linear(
    x: Tensor, weight: Tensor, bias: Tensor | None, activation: str = "none"
) -> Tensor:
    """``act(x W^T + b)`` on oneDNN; ``weight`` packed (``onednn_pack``) or plain, of
    ``x``'s dtype."""
    scalars: list[object] = [None] if activation == "relu" else []
    y: Tensor = torch.ops.mkldnn._linear_pointwise(x, weight, bias, activation, scalars, "")
    return y


# -- fbgemm dynamic int8 -----------------------------------------------------------------


def select_quantized_engine() -> None:
    """fbgemm's x86 kernels (AVX-512 VNNI where the CPU has it); ``x86`` is its alias
    with oneDNN fallbacks."""
    engines = torch.backends.quantized.supported_engines
    if torch.backends.quantized.engine not in ("x86", "fbgemm"):
        torch.backends.quantized.engine = "x86" if "x86" in engines else "fbgemm"


def fbgemm_pack(q: Tensor, scale: Tensor, bias: Tensor | None) -> KernelWeight:
    """Pack int8 ``q`` ``(N, K)`` with per-row ``scale`` ``(N,)`` and an fp32 ``bias``."""
    select_quantized_engine()
    zeros = torch.zeros(q.size(0), dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # per-channel quantized tensors: deprecated in 2.13
        qw = torch._make_per_channel_quantized_tensor(q.cpu(), scale.double().cpu(), zeros, 0)
    b = None if bias is None else bias.float().cpu().contiguous()
    return KernelWeight(torch.ops.quantized.linear_prepack(qw, b), q.size(0))


def _fbgemm_call(x: Tensor, params: object, activation: str) -> Tensor:
    op = (
        torch.ops.quantized.linear_relu_dynamic
        if activation == "relu"
        else torch.ops.quantized.linear_dynamic
    )
    y: Tensor = op(x, params, False)
    return y


@torch.library.custom_op("attnkit::fbgemm_linear_dynamic", mutates_args=())
def _fbgemm_linear_op(x: Tensor, handle: int, out_features: int, activation: str) -> Tensor:
    """``fbgemm_linear`` on the live weight ``handle`` (what a compiled step calls)."""
    return _fbgemm_call(x, _live(handle), activation)


@_fbgemm_linear_op.register_fake
def _(x: Tensor, handle: int, out_features: int, activation: str) -> Tensor:
    return x.new_empty((*x.shape[:-1], out_features))


def fbgemm_linear(x: Tensor, packed: KernelWeight, activation: str = "none") -> Tensor:
    """``act(x W^T + b)``: fp32 ``x`` quantised per call (per tensor), fp32 out."""
    if torch.compiler.is_compiling():
        y: Tensor = torch.ops.attnkit.fbgemm_linear_dynamic(
            x, packed.handle, packed.out_features, activation
        )
        return y
    return _fbgemm_call(x, packed.value, activation)


def fbgemm_unpack(packed: KernelWeight) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(q int8 (N, K), scale fp32 (N,), bias (N,) or None)`` of a packed weight."""
    qw, bias = torch.ops.quantized.linear_unpack(packed.value)
    return qw.int_repr(), qw.q_per_channel_scales().float(), bias


# -- weight-only int8 --------------------------------------------------------------------


def int8pack_mm(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    """``x W^T`` for ``x`` ``(M, K)`` bf16, ``q`` int8 ``(N, K)``, ``scale`` bf16 ``(N,)``."""
    y: Tensor = torch.ops.aten._weight_int8pack_mm(x, q, scale)
    return y


# -- weight-only int4 --------------------------------------------------------------------

INT4_N_MULTIPLE = 16
"""torch 2.13's CPU int4 packing needs the output rows (N) in multiples of 16."""


def int4_unavailable() -> str:
    """Why this torch cannot run the CPU int4 kernel (``""`` when it can)."""
    missing = [
        name
        for name in ("_convert_weight_to_int4pack_for_cpu", "_weight_int4pack_mm_for_cpu")
        if not hasattr(torch.ops.aten, name)
    ]
    if missing:
        return f"torch {torch.__version__} has no aten.{missing[0]} (the CPU int4 kernel)"
    return ""


def int4_pack(q: Tensor) -> Tensor:
    """``q`` ``(N, K)`` integers in 0..15 -> the kernel's packed uint8 layout ``(N, K/2)``."""
    packed: Tensor = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
        q.to(torch.int32).contiguous(), 1
    )
    return packed


def int4pack_mm(x: Tensor, packed: Tensor, group_size: int, scales_and_zeros: Tensor) -> Tensor:
    """``x W^T`` for ``x`` ``(M, K)`` bf16, ``packed`` from ``int4_pack``, ``scales_and_zeros``
    bf16 ``(K/group_size, N, 2)`` (``[..., 0]`` scale, ``[..., 1]`` zero) -> ``(M, N)`` bf16.

    With fp32 ``x`` the kernel takes a path ~50x slower (measured at SmolLM2's
    shapes), hence bf16."""
    y: Tensor = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group_size, scales_and_zeros)
    return y
