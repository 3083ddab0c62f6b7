"""Weight-only int4 linears for the CPU: 4-bit group-wise weights, bf16 activations (``"int4"``).

Round-to-nearest (RTN), asymmetric, one scale and one zero per ``group_size``
consecutive inputs of each output row: ``w = (q - 8) * scale + zero`` with
``q`` in 0..15, the convention of PyTorch's CPU kernel
``aten._weight_int4pack_mm_for_cpu`` (called through
``attnkit.kernels.torch_ops``). Scales and zeros are rounded to bf16 *before*
the weights are rounded to 4 bits, so ``dequantize_groups`` gives exactly the
weights the kernel multiplies by, and quantising those again gives the same
``q`` (the round trip is stable; tested).

Group size: ``DEFAULT_GROUP_SIZE`` (32: on SmolLM2-135M, teacher-forced over
one 59-token text, fp32's next token kept at 81% of positions with groups of 32
against 71% with 64, median logit error 9% against 35%; ``bench/NOTES.md``), or
``ATTNKIT_INT4_GROUP`` (32, 64 or 128) in the environment, or
``quantize_model(..., group_size=...)``. Smaller groups are more accurate and
read ~0.5 bit/weight more per halving. A linear whose input width is not a
multiple of the group size uses the largest of 128/64/32 that divides it; one
that fits none (or whose output count is not a multiple of 16, as the kernel
needs) stays int8 weight-only (``quantize_model`` decides: ``fitting_group``).

``state_dict`` holds the portable form: ``weight_int4`` ``(N, K/2)`` uint8
(even inputs in the low nibble), ``weight_scale`` and ``weight_zero``
``(N, K/group_size)`` fp32 (holding bf16 values); ``load_state_dict`` repacks
for the kernel.

**Given codes** (``Int4Linear.from_codes``: a GGUF file's Q4_0/Q4_1 blocks,
``attnkit.interop.gguf.blocks``): the codes are used as they are, and scales
and zeros that bf16 cannot hold exactly (a GGUF block's fp16 scale has 3 more
mantissa bits) are kept beside the kernel's bf16 copy in fp32, so ``state_dict``,
``weight`` and an export give back exactly what was given; the kernel itself
multiplies by the bf16-rounded scales (the kernel takes scales in its
activations' dtype only, and fp32 activations run its ~50x slower path).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.kernels.torch_ops import (
    INT4_N_MULTIPLE,
    check_activation,
    int4_pack,
    int4pack_mm,
)
from attnkit.quantize.stored_form import read_stored

GROUP_SIZES = (32, 64, 128)
DEFAULT_GROUP_SIZE = 32
GROUP_ENV = "ATTNKIT_INT4_GROUP"
INT4_REL_ERROR = 0.15
"""Documented bound for a linear: ``max|y_int4 - y_fp32| <= INT4_REL_ERROR * max|y_fp32|``
for Gaussian-like weights and inputs at group sizes 32-128 (measured ~0.05-0.08)."""


def group_size_from_env() -> int:
    """``ATTNKIT_INT4_GROUP`` if set (``ValueError`` naming it unless 32, 64 or 128),
    else ``DEFAULT_GROUP_SIZE``."""
    raw = os.environ.get(GROUP_ENV, "").strip()
    if not raw:
        return DEFAULT_GROUP_SIZE
    if not raw.isdigit() or int(raw) not in GROUP_SIZES:
        raise ValueError(f"{GROUP_ENV}: expected one of 32, 64, 128; got {raw!r}")
    return int(raw)


def fitting_group(in_features: int, out_features: int, group_size: int) -> int | None:
    """The group size to use for a ``(out_features, in_features)`` weight: ``group_size``
    if it divides ``in_features``, else the largest smaller one that does; ``None`` when
    none does or ``out_features`` is not a multiple of 16 (the kernel's packing)."""
    if out_features % INT4_N_MULTIPLE:
        return None
    for g in sorted(GROUP_SIZES, reverse=True):
        if g <= group_size and in_features % g == 0:
            return g
    return None


def quantize_groups(weight: Tensor, group_size: int) -> tuple[Tensor, Tensor, Tensor]:
    """``weight`` ``(N, K)`` -> ``(q uint8 (N, K) in 0..15, scale (N, G), zero (N, G))``,
    ``G = K / group_size``; scale and zero are fp32 holding bf16 values."""
    n, k = weight.shape
    w = weight.detach().float().reshape(n, k // group_size, group_size)
    lo, hi = w.amin(-1), w.amax(-1)
    scale = ((hi - lo) / 15).clamp_min(1e-8).to(torch.bfloat16).float()
    zero = (lo + 8 * scale).to(torch.bfloat16).float()
    q = torch.round((w - zero[..., None]) / scale[..., None] + 8).clamp_(0, 15)
    return q.reshape(n, k).to(torch.uint8), scale, zero


def dequantize_groups(q: Tensor, scale: Tensor, zero: Tensor) -> Tensor:
    """The fp32 ``(N, K)`` weight of ``quantize_groups``' output."""
    n, k = q.shape
    g = scale.size(1)
    w = (q.float().reshape(n, g, k // g) - 8) * scale[..., None] + zero[..., None]
    return w.reshape(n, k)


def pack_nibbles(q: Tensor) -> Tensor:
    """``(N, K)`` values 0..15 -> ``(N, K/2)`` uint8, even columns in the low nibble."""
    q = q.to(torch.uint8)
    return q[:, 0::2] | (q[:, 1::2] << 4)


def unpack_nibbles(packed: Tensor) -> Tensor:
    """Inverse of ``pack_nibbles``."""
    return torch.stack([packed & 15, packed >> 4], dim=-1).reshape(packed.size(0), -1)


def packed_codes(packed: Tensor, group_size: int, scales_and_zeros: Tensor) -> Tensor:
    """The 4-bit values ``q`` ``(N, K)`` uint8 of a weight packed by ``int4_pack``, read back.

    The kernel with scale 1 and zero 0 multiplies by ``q - 8``: small integers, exact in
    bf16, so the identity's product returns them exactly. ``scales_and_zeros``: the
    weight's own ``(K/group, N, 2)`` (its shape and dtype)."""
    ones = torch.zeros_like(scales_and_zeros)
    ones[..., 0] = 1
    eye = torch.eye(scales_and_zeros.size(0) * group_size, dtype=torch.bfloat16)
    q_minus_8 = int4pack_mm(eye, packed, group_size, ones)  # (K, N)
    return (q_minus_8.t().float() + 8).round().to(torch.uint8)


class Int4Linear(nn.Module):
    """``y = act(x W^T + b)``: 4-bit group-wise weights, bf16 activations, fp32 in and out.

    Args:
        weight: ``(N, K)`` float weight; ``N`` a multiple of 16, ``K`` of ``group_size``.
        bias: ``(N,)`` or ``None`` (kept in fp32, added after the product).
        group_size: 32, 64 or 128 inputs per scale/zero.
        activation: ``"none"`` or ``"relu"``.

    Only the kernel's packed weight and its bf16 scales and zeros are resident
    (half a byte per weight plus 4 bytes per group); ``state_dict`` unpacks them
    into the portable form (module docstring) and ``load_state_dict`` repacks.
    """

    def __init__(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        *,
        group_size: int = DEFAULT_GROUP_SIZE,
        activation: str = "none",
    ) -> None:
        super().__init__()
        self._setup(weight.shape, bias, group_size, activation)
        self._pack(*quantize_groups(weight, group_size))

    def _setup(
        self, shape: torch.Size, bias: Tensor | None, group_size: int, activation: str
    ) -> None:
        check_activation(activation)
        self.activation = activation
        self.out_features, self.in_features = shape
        if fitting_group(self.in_features, self.out_features, group_size) != group_size:
            raise ValueError(
                f"group_size: {group_size} does not fit a ({self.out_features}, "
                f"{self.in_features}) weight (N % 16, K % group_size)"
            )
        self.group_size = group_size
        self._bias = None if bias is None else bias.detach().float().clone()

    @classmethod
    def from_linear(cls, linear: nn.Linear, **kwargs: Any) -> Int4Linear:
        return cls(linear.weight, linear.bias, **kwargs)

    @classmethod
    def from_codes(
        cls,
        q: Tensor,
        scale: Tensor,
        zero: Tensor,
        bias: Tensor | None = None,
        *,
        activation: str = "none",
    ) -> Int4Linear:
        """The linear whose weight is exactly ``dequantize_groups(q, scale, zero)``.

        ``q`` ``(N, K)`` values 0..15; ``scale``, ``zero`` ``(N, G)`` float (any values:
        those bf16 cannot hold are kept in fp32 too, module doc); the group size is
        ``K / G``. ``ValueError`` if the kernel cannot take the shape."""
        n, k = q.shape
        groups = scale.size(1)
        if scale.shape != zero.shape or scale.size(0) != n or groups == 0 or k % groups:
            raise ValueError(
                f"scale, zero: {tuple(scale.shape)} and {tuple(zero.shape)} are not the "
                f"groups of a ({n}, {k}) weight"
            )
        module = cls.__new__(cls)
        nn.Module.__init__(module)
        module._setup(q.shape, bias, k // groups, activation)
        module._pack(q, scale.float(), zero.float())
        return module

    def _pack(self, q: Tensor, scale: Tensor, zero: Tensor) -> None:
        self._packed = int4_pack(q)
        # The kernel wants (K/group, N, 2): scale and zero side by side, groups first.
        sz = torch.stack([scale.t(), zero.t()], dim=-1)
        self._scales_and_zeros = sz.to(torch.bfloat16).contiguous()
        # Given scales or zeros that bf16 rounds (from_codes) are kept exactly as well.
        exact = torch.equal(self._scales_and_zeros.float(), sz.float())
        self._exact: tuple[Tensor, Tensor] | None = (
            None if exact else (scale.float().contiguous(), zero.float().contiguous())
        )

    def codes(self) -> Tensor:
        """The 4-bit values ``q`` ``(N, K)`` uint8, read back from the packed weight."""
        return packed_codes(self._packed, self.group_size, self._scales_and_zeros)

    def unpacked(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(q (N, K), scale (N, G), zero (N, G))`` as ``quantize_groups`` or
        ``from_codes`` gave them (fp32)."""
        if self._exact is not None:
            return self.codes(), self._exact[0].clone(), self._exact[1].clone()
        sz = self._scales_and_zeros.float()
        return self.codes(), sz[..., 0].t().contiguous(), sz[..., 1].t().contiguous()

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        q, scale, zero = self.unpacked()
        destination[prefix + "weight_int4"] = pack_nibbles(q)
        destination[prefix + "weight_scale"] = scale
        destination[prefix + "weight_zero"] = zero
        if self._bias is not None:
            destination[prefix + "bias"] = self._bias.clone()

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors
    ) -> None:
        names = ("weight_int4", "weight_scale", "weight_zero")
        read = read_stored(state_dict, prefix, names, has_bias=self._bias is not None,
                           missing=missing, unexpected=unexpected)  # fmt: skip
        if read is None:
            return
        (packed, scale, zero), bias = read
        self._pack(unpack_nibbles(packed), scale.float(), zero.float())
        self._bias = None if bias is None else bias.detach().float().clone()

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``(..., K)`` -> ``(..., N)`` fp32."""
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        y = int4pack_mm(rows, self._packed, self.group_size, self._scales_and_zeros)
        y = y.float().view(*x.shape[:-1], self.out_features)
        if self._bias is not None:
            y = y + self._bias
        return torch.relu(y) if self.activation == "relu" else y

    @property
    def weight(self) -> Tensor:
        """The dequantised float weight (a copy): the weights ``forward`` multiplies by,
        except that from given codes (``from_codes``) it is the exact given weight, which
        the kernel multiplies by with bf16-rounded scales and zeros."""
        return dequantize_groups(*self.unpacked())

    @property
    def bias(self) -> Tensor | None:
        return self._bias

    def nbytes(self) -> int:
        """Resident bytes: packed 4-bit weight, bf16 scales and zeros (and their exact fp32
        copy, if any), fp32 bias."""
        n = self.out_features
        groups = n * (self.in_features // self.group_size)
        exact = 0 if self._exact is None else 8 * groups
        return self._packed.numel() + groups * 4 + exact + (4 * n if self._bias is not None else 0)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"int4 weights in groups of {self.group_size}, bf16 activations, "
            f"activation={self.activation}"
        )
