"""Int8 weights in blocks of 32 with one scale each (GGUF ``Q8_0``), run on the int4 kernel.

A ``Q8_0`` block holds 32 int8 codes ``q`` and one scale ``d``: ``w = d * q``.
PyTorch has no CPU kernel for int8 weights with a scale per block (its int8
weight-only kernel takes one scale per output row), and quantising the blocks'
weights again per row rounds them a second time. Its int4 kernel
(``aten._weight_int4pack_mm_for_cpu``, ``w = (c - 8) * scale + zero`` over groups
of 32) takes them exactly as **two nibble planes**. With ``u = q + 128`` in
0..255, ``h = u >> 4`` and ``l = u & 15`` (both 0..15)::

    d * q = (h - 8) * 16d  +  (l - 8) * d + 8d
            \\_ plane H: scale 16d, zero 0 _/   \\_ plane L: scale d, zero 8d _/

The two planes are stacked as one ``(2N, K)`` int4 weight, so a product is one
kernel call reading a byte per weight (what ``Q8_0`` itself reads), and the
output's two halves are added. As with ``Int4Linear`` the kernel takes bf16
activations and bf16 copies of the scales (``16d``, ``d`` and ``8d`` round
alike: powers of two apart), so ``forward`` multiplies by ``bf16(d) * q``; the
stored codes and fp32 scales stay exact (``weight``, ``state_dict``, an export).

``state_dict`` holds the portable form: ``weight_int8`` ``(N, K)`` int8 and
``weight_scale`` ``(N, K/32)`` fp32.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.kernels.torch_ops import INT4_N_MULTIPLE, int4_pack, int4pack_mm
from attnkit.quantize.int4 import packed_codes
from attnkit.quantize.stored_form import read_stored

BLOCK = 32
INT8_BLOCK_KEYS = ("weight_int8", "weight_scale")


def nibble_planes(q: Tensor, scale: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``q`` ``(N, K)`` int8 and ``scale`` ``(N, K/32)`` -> the int4 form of the two planes
    (module doc): codes ``(2N, K)`` uint8 in 0..15, scales and zeros ``(2N, K/32)`` fp32;
    ``dequantize_groups`` of them, halves added, is ``scale * q`` (exact in real numbers)."""
    u = q.to(torch.int16) + 128
    high, low = (u >> 4).to(torch.uint8), (u & 15).to(torch.uint8)
    scale = scale.float()
    scales = torch.cat([16 * scale, scale])
    zeros = torch.cat([torch.zeros_like(scale), 8 * scale])
    return torch.cat([high, low]), scales, zeros


class Int8BlockLinear(nn.Module):
    """``y = x W^T + b`` with ``W = d * q`` given as int8 codes in blocks of 32 (``Q8_0``).

    Built by ``from_codes``; bf16 activations into the int4 kernel, fp32 in and out.
    ``x`` ``(..., K)`` -> ``(..., N)``; ``N`` a multiple of 8 (the kernel packs ``2N``
    rows in sixteens), ``K`` of 32.
    """

    def __init__(self, q: Tensor, scale: Tensor, bias: Tensor | None = None) -> None:
        super().__init__()
        self._pack(q, scale, bias)

    def _pack(self, q: Tensor, scale: Tensor, bias: Tensor | None) -> None:
        n, k = q.shape
        if q.dtype != torch.int8:
            raise ValueError(f"q: expected int8 codes, got {q.dtype}")
        if k % BLOCK or scale.shape != (n, k // BLOCK) or (2 * n) % INT4_N_MULTIPLE:
            raise ValueError(
                f"scale: {tuple(scale.shape)} is not the blocks of 32 of a ({n}, {k}) weight "
                f"(or 2N is not a multiple of {INT4_N_MULTIPLE})"
            )
        self.out_features, self.in_features = n, k
        self._scale = scale.float().contiguous().clone()  # exact: the kernel's copy is bf16
        self._bias = None if bias is None else bias.detach().float().clone()
        codes, scales, zeros = nibble_planes(q, self._scale)
        self._packed = int4_pack(codes)
        # The kernel wants (K/32, 2N, 2): scale and zero side by side, groups first.
        self._scales_and_zeros = torch.stack([scales.t(), zeros.t()], -1).to(torch.bfloat16)

    @classmethod
    def from_codes(cls, q: Tensor, scale: Tensor, bias: Tensor | None = None) -> Int8BlockLinear:
        """The linear whose weight is exactly ``scale * q`` (blocks of 32 along ``K``)."""
        return cls(q, scale, bias)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``(..., K)`` -> ``(..., N)`` fp32."""
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        planes = int4pack_mm(rows, self._packed, BLOCK, self._scales_and_zeros).float()
        y = planes[:, : self.out_features] + planes[:, self.out_features :]
        y = y.view(*x.shape[:-1], self.out_features)
        return y if self._bias is None else y + self._bias

    def codes(self) -> Tensor:
        """The int8 codes ``q`` ``(N, K)``, read back from the packed planes."""
        planes = packed_codes(self._packed, BLOCK, self._scales_and_zeros).int()  # (2N, K)
        high, low = planes[: self.out_features], planes[self.out_features :]
        return (16 * high + low - 128).to(torch.int8)

    @property
    def weight(self) -> Tensor:
        """The exact float weight ``d * q`` ``(N, K)`` (a copy)."""
        n, k = self.out_features, self.in_features
        return (self.codes().float().view(n, -1, BLOCK) * self._scale[..., None]).view(n, k)

    @property
    def bias(self) -> Tensor | None:
        return self._bias

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        destination[prefix + "weight_int8"] = self.codes()
        destination[prefix + "weight_scale"] = self._scale.clone()
        if self._bias is not None:
            destination[prefix + "bias"] = self._bias.clone()

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors
    ) -> None:
        read = read_stored(state_dict, prefix, INT8_BLOCK_KEYS, has_bias=self._bias is not None,
                           missing=missing, unexpected=unexpected)  # fmt: skip
        if read is not None:
            (q, scale), bias = read
            self._pack(q, scale, bias)

    def nbytes(self) -> int:
        """Resident bytes: the packed planes (a byte per weight), their bf16 scales and zeros,
        the exact fp32 scales, the bias."""
        groups = self.out_features * (self.in_features // BLOCK)
        bias = 0 if self._bias is None else 4 * self.out_features
        return self._packed.numel() + 8 * groups + 4 * groups + bias

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            "int8 weights in blocks of 32 (two int4 planes), bf16 activations"
        )
