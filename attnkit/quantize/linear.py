"""Drop-in replacements for ``nn.Linear`` on CPU: prepacked fp32/bf16 (oneDNN) and int8 (fbgemm).

Measured at the decode step's shapes (``bench/gemm_paths.py``, 2-core Zen 5,
AVX-512 VNNI + BF16, see ``bench/NOTES.md``): ``F.linear`` in fp32 goes to
MKL's sgemm, which on this AMD CPU reaches ~130-190 GFLOP/s; the same fp32
product through oneDNN with a prepacked weight reaches ~280-420, bf16 through
oneDNN ~320-760, and int8 through fbgemm's ``quantized::linear_dynamic``
~460-1330. So:

* ``PackedLinear(precision="fp32" | "bf16")``: the weight reordered once into
  oneDNN's blocked layout (``mkldnn._reorder_linear_weight``), applied with
  ``mkldnn._linear_pointwise`` (optionally with a fused ReLU). Inputs and
  outputs stay fp32 (bf16: the input is rounded to bf16 inside, the output
  widened back), so it swaps in anywhere a float ``nn.Linear`` was.
* ``Bf16Linear``: a plain bf16 weight, for a compiled step (inductor packs it).
* ``Int8Linear``: symmetric per-output-channel int8 weights (scale =
  max|w_row| / 127), packed for fbgemm once; activations are quantised per
  call, per tensor (asymmetric u8, inside the fbgemm op), output fp32 with the
  bias added. Error bound: see ``INT8_REL_ERROR``.

Only the packed weight is resident (no float copy): ``state_dict`` unpacks it
(``weight`` for ``PackedLinear``; ``weight_int8`` + ``weight_scale`` for
``Int8Linear``) and ``load_state_dict`` repacks, so checkpoints round-trip.
Both modules are inference-only (no autograd through the packed weights).

The ops are private/legacy torch APIs, called through their one wrapper,
``attnkit.kernels.torch_ops``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnkit.kernels.torch_ops import (
    check_activation,
    fbgemm_linear,
    fbgemm_pack,
    fbgemm_unpack,
    onednn_linear,
    onednn_pack,
)
from attnkit.quantize.stored_form import read_stored

PACKED_PRECISIONS = ("fp32", "bf16")
"""The weight formats of ``PackedLinear`` (``attnkit.quantize.PRECISIONS`` are the
model-wide conversions)."""
INT8_REL_ERROR = 0.02
"""Documented bound: ``max|y_int8 - y_fp32| <= INT8_REL_ERROR * max|y_fp32|`` for
LayerNorm-like or ReLU inputs and Xavier-like weights (measured: 1.1e-2 worst)."""


class PackedLinear(nn.Module):
    """``y = act(x W^T + b)`` on a oneDNN-prepacked fp32 or bf16 weight; fp32 in and out.

    Args:
        weight: ``(N, K)`` float weight (copied and packed).
        bias: ``(N,)`` or ``None``.
        precision: ``"fp32"`` or ``"bf16"`` (weights and the GEMM's inputs in bf16,
            fp32 accumulation, fp32 output).
        activation: ``"none"`` or ``"relu"`` fused into the GEMM.
        rows_hint: the number of rows the packing is tuned for (any count works).
    """

    def __init__(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        *,
        precision: str = "fp32",
        activation: str = "none",
        rows_hint: int = 32,
    ) -> None:
        super().__init__()
        if precision not in PACKED_PRECISIONS:
            raise ValueError(f"precision: expected one of {PACKED_PRECISIONS}, got {precision!r}")
        check_activation(activation)
        self.precision, self.activation, self.rows_hint = precision, activation, rows_hint
        self.dtype = torch.float32 if precision == "fp32" else torch.bfloat16
        self.out_features, self.in_features = weight.shape
        self._pack(weight.detach(), None if bias is None else bias.detach())

    def _pack(self, weight: Tensor, bias: Tensor | None) -> None:
        w = weight.to(device="cpu", dtype=self.dtype).contiguous()
        self._packed = onednn_pack(w, self.rows_hint)
        self._bias = None if bias is None else bias.to(self.dtype).contiguous()

    @classmethod
    def from_linear(cls, linear: nn.Linear, **kwargs: Any) -> PackedLinear:
        return cls(linear.weight, linear.bias, **kwargs)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``(..., K)`` fp32 -> ``(..., N)`` fp32."""
        y = onednn_linear(x.to(self.dtype), self._packed, self._bias, self.activation)
        return y if self.dtype == torch.float32 else y.float()

    @property
    def weight(self) -> Tensor:
        """The dense weight, unpacked on demand (a copy; not used by ``forward``)."""
        return self._packed.to_dense()

    def nbytes(self) -> int:
        """Resident bytes of the packed weight and bias."""
        n = self.out_features * self.in_features * self._packed.element_size()
        return n + (0 if self._bias is None else self._bias.numel() * self._bias.element_size())

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        destination[prefix + "weight"] = self.weight
        if self._bias is not None:
            destination[prefix + "bias"] = self._bias.clone()

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors
    ) -> None:
        read = read_stored(state_dict, prefix, ["weight"], has_bias=self._bias is not None,
                           missing=missing, unexpected=unexpected)  # fmt: skip
        if read is not None:
            (weight,), bias = read
            self._pack(weight, bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"precision={self.precision}, activation={self.activation}"
        )


class Bf16Linear(nn.Module):
    """``y = act(x W^T + b)`` on a plain (unpacked) bf16 weight; fp32 in and out.

    What a compiled step runs for bf16 (``--compile --precision bf16``): oneDNN's
    packed weight (``PackedLinear``) is an opaque tensor the compiler cannot
    trace, while a plain bf16 ``linear`` with frozen weights is one inductor
    packs for oneDNN itself. Eager, ``PackedLinear(precision="bf16")`` is the
    faster. ``state_dict``: ``weight`` and ``bias`` in bf16 (a float one loads).
    """

    weight: Tensor
    bias: Tensor | None

    def __init__(
        self, weight: Tensor, bias: Tensor | None = None, *, activation: str = "none"
    ) -> None:
        super().__init__()
        check_activation(activation)
        self.activation = activation
        self.out_features, self.in_features = weight.shape
        self.register_buffer("weight", weight.detach().to(torch.bfloat16).contiguous())
        b = None if bias is None else bias.detach().to(torch.bfloat16).clone()
        self.register_buffer("bias", b)

    @classmethod
    def from_linear(cls, linear: nn.Linear, **kwargs: Any) -> Bf16Linear:
        return cls(linear.weight, linear.bias, **kwargs)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``(..., K)`` fp32 -> ``(..., N)`` fp32."""
        y = nn.functional.linear(x.to(torch.bfloat16), self.weight, self.bias).float()
        return torch.relu(y) if self.activation == "relu" else y

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"plain bf16 weights, activation={self.activation}"
        )


def quantize_rows(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric per-row int8: ``weight ~= q * scale[:, None]``, ``q`` in [-127, 127]."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


class Int8Linear(nn.Module):
    """``y = act(x W^T + b)`` with int8 per-channel weights and dynamic int8 activations.

    fp32 in and out. Built from a float weight (``from_linear`` or the
    constructor) or from ``(weight_int8, weight_scale)`` through
    ``load_state_dict``.

    Args:
        weight: ``(N, K)`` float weight, quantised per output row.
        bias: ``(N,)`` float or ``None`` (kept in fp32).
        activation: ``"none"`` or ``"relu"`` (fused by fbgemm).
        smooth: SmoothQuant's factors ``s`` ``(K,)`` (``attnkit.quantize.smooth``):
            the weight's columns are multiplied by ``s`` before quantising and
            every input divided by it, so the product is unchanged and the
            input's outlier channels no longer set its one int8 scale. Saved
            as ``input_smooth``. ``None``: plain dynamic int8.
    """

    def __init__(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        *,
        activation: str = "none",
        smooth: Tensor | None = None,
    ) -> None:
        super().__init__()
        check_activation(activation)
        self.activation = activation
        self.out_features, self.in_features = weight.shape
        self._smooth: Tensor | None = None
        self._inverse_smooth: Tensor | None = None
        if smooth is not None:
            self._set_smooth(smooth)
            weight = weight.detach().float() * smooth.float()
        q, scale = quantize_rows(weight)
        self._pack(q, scale, None if bias is None else bias.detach())

    def _set_smooth(self, smooth: Tensor) -> None:
        if smooth.shape != (self.in_features,) or not bool((smooth > 0).all()):
            got = tuple(smooth.shape)
            raise ValueError(f"smooth: expected ({self.in_features},) positive factors, got {got}")
        self._smooth = smooth.detach().float().cpu().clone()
        # A multiply per input (not a divide): one (M, K) pass, next to the (M, K, N) GEMM.
        self._inverse_smooth = 1.0 / self._smooth

    def _pack(self, q: Tensor, scale: Tensor, bias: Tensor | None) -> None:
        if q.dtype != torch.int8 or q.shape != (self.out_features, self.in_features):
            raise ValueError(
                f"weight_int8: expected int8 {(self.out_features, self.in_features)}, "
                f"got {q.dtype} {tuple(q.shape)}"
            )
        self._packed = fbgemm_pack(q, scale, bias)
        self._has_bias = bias is not None

    @classmethod
    def from_linear(cls, linear: nn.Linear, **kwargs: Any) -> Int8Linear:
        return cls(linear.weight, linear.bias, **kwargs)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``(..., K)`` fp32 -> ``(..., N)`` fp32."""
        x = x.float()
        if self._inverse_smooth is not None:
            x = x * self._inverse_smooth
        return fbgemm_linear(x, self._packed, self.activation)

    def unpacked(self) -> tuple[Tensor, Tensor, Tensor | None]:
        """``(weight_int8 (N, K), weight_scale (N,) fp32, bias (N,) or None)``."""
        return fbgemm_unpack(self._packed)

    @property
    def weight(self) -> Tensor:
        """The dequantised float weight (a copy; not used by ``forward``), smoothing undone."""
        q, scale, _ = self.unpacked()
        w = q.float() * scale[:, None]
        return w if self._smooth is None else w / self._smooth

    def nbytes(self) -> int:
        """Resident bytes: int8 weight, fp32 scales and bias (packing overhead not counted)."""
        n = self.out_features * (self.in_features + 4)
        n += 0 if self._smooth is None else 8 * self.in_features  # factors and inverses
        return n + (4 * self.out_features if self._has_bias else 0)

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        q, scale, bias = self.unpacked()
        destination[prefix + "weight_int8"] = q
        destination[prefix + "weight_scale"] = scale
        if bias is not None:
            destination[prefix + "bias"] = bias
        if self._smooth is not None:
            destination[prefix + "input_smooth"] = self._smooth.clone()

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors
    ) -> None:
        keys = [prefix + "weight_int8", prefix + "weight_scale"]
        absent = [k for k in keys if k not in state_dict]
        if absent:
            missing.extend(absent)
            return
        bias = state_dict.get(prefix + "bias")
        if (bias is None) == self._has_bias:
            (missing if bias is None else unexpected).append(prefix + "bias")
            return
        smooth = state_dict.get(prefix + "input_smooth")
        if (smooth is None) != (self._smooth is None):
            # Weights smoothed for other inputs would be silently wrong: refuse the mismatch.
            (missing if smooth is None else unexpected).append(prefix + "input_smooth")
            return
        self._pack(state_dict[keys[0]], state_dict[keys[1]].float(), bias)
        if smooth is not None:
            self._set_smooth(smooth)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"int8 per-channel weights, dynamic activations, activation={self.activation}"
            + (", smoothed" if self._smooth is not None else "")
        )
