"""GGUF Q4_0/Q4_1/Q8_0 blocks <-> the int4 kernel's codes, scales and zeros, exactly.

llama.cpp's classic 4-bit formats quantize each run of 32 consecutive weights
of a row (a block) as 4-bit codes ``q`` in 0..15 and fp16 parameters:

* ``Q4_0``: ``d``; ``w = d * (q - 8)``; 18 bytes: ``d``, then 16 bytes of codes;
* ``Q4_1``: ``d`` and ``m``; ``w = d * q + m``; 20 bytes: ``d``, ``m``, 16 bytes;

the 16 code bytes hold code ``j`` in the low nibble of byte ``j`` and code
``j + 16`` in its high nibble. ``Int4Linear`` (``attnkit.quantize.int4``) computes
``w = (q - 8) * scale + zero`` over groups of 32, so a block is the group
``scale = d`` with ``zero = 0`` (Q4_0) or ``zero = 8d + m`` (Q4_1), the same
codes. ``d`` is exact in fp32; so is ``8d + m`` unless the two differ by more
than 2^13 in magnitude (fp16's 11 significant bits in fp32's 24), and then
(``to_record`` returns None) the caller dequantizes that tensor instead. With
an exact ``zero``, ``(q - 8) * scale + zero`` is one rounding of the same real
number as the ``gguf`` package's ``d * q + m``: the float weights agree bit for
bit.

Between the file and the model the tensors go through the import's key tables
(row permutations for RoPE, q/k/v stacked into one projection), which only
move rows. So a quantized tensor travels as a **record** tensor, uint8
``(N, G, RECORD_BYTES)``: per row and group the fp32 ``scale``, the fp32
``zero`` and the 32 codes packed two to a byte (even codes in the low nibble,
``Int4Linear``'s ``pack_nibbles`` order). Every row operation treats it as it
would the float weight, and nothing is rounded on the way.

``Q8_0`` (``d``; ``w = d * q``, ``q`` int8; 34 bytes: ``d``, then 32 codes) travels
the same way as a **Q8 record**, uint8 ``(N, G, Q8_RECORD_BYTES)``: the fp32 ``d``
(exact: an fp16 value) and the 32 int8 codes as bytes. ``Int8BlockLinear``
(``attnkit.quantize.int8_blocks``) runs it on the int4 kernel as two nibble planes.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from attnkit.quantize.int4 import dequantize_groups

Q4_TYPES = ("Q4_0", "Q4_1")
KEPT_TYPES = (*Q4_TYPES, "Q8_0")
BLOCK = 32
RECORD_BYTES = 4 + 4 + BLOCK // 2
Q8_RECORD_BYTES = 4 + BLOCK
_BLOCK_BYTES = {"Q4_0": 2 + BLOCK // 2, "Q4_1": 4 + BLOCK // 2, "Q8_0": 2 + BLOCK}


def is_record(tensor: Tensor) -> bool:
    """Whether ``tensor`` is a record (module doc: Q4 or Q8), not a float weight."""
    return (
        tensor.dtype == torch.uint8
        and tensor.dim() == 3
        and tensor.size(-1) in (RECORD_BYTES, Q8_RECORD_BYTES)
    )


def is_q8_record(tensor: Tensor) -> bool:
    """Whether ``tensor`` is a record of Q8_0 blocks."""
    return is_record(tensor) and tensor.size(-1) == Q8_RECORD_BYTES


def weight_shape(tensor: Tensor) -> tuple[int, ...]:
    """The ``(N, K)`` of the weight a record stands for; a float tensor's own shape."""
    if is_record(tensor):
        return (tensor.size(0), tensor.size(1) * BLOCK)
    return tuple(tensor.shape)


def _unpack_gguf(qs: np.ndarray) -> np.ndarray:
    """``(..., 16)`` code bytes in GGUF order -> ``(..., 32)`` codes."""
    return np.concatenate([qs & 15, qs >> 4], axis=-1)


def _pack_gguf(q: np.ndarray) -> np.ndarray:
    """``(..., 32)`` codes -> ``(..., 16)`` bytes in GGUF order."""
    return (q[..., :16] | (q[..., 16:] << 4)).astype(np.uint8)


def to_record(raw: np.ndarray, qtype: str, shape: tuple[int, int]) -> Tensor | None:
    """A Q4_0/Q4_1/Q8_0 tensor's bytes (``raw``, the file's) as a record for weight
    ``shape`` ``(N, K)``; None when a Q4_1 block's ``8d + m`` is not exact in fp32."""
    n, k = shape
    groups = k // BLOCK
    blocks = np.asarray(raw, dtype=np.uint8).reshape(n, groups, _BLOCK_BYTES[qtype])
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
    if qtype == "Q8_0":
        scale = d.astype(np.float32)[..., None].view(np.uint8)
        return torch.from_numpy(np.ascontiguousarray(np.concatenate([scale, blocks[..., 2:]], -1)))
    if qtype == "Q4_1":
        m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
        wanted = 8 * d + m  # exact in float64: both are fp16 values
        zero = wanted.astype(np.float32)
        if not np.array_equal(zero.astype(np.float64), wanted):
            return None
    else:
        zero = np.zeros_like(d, dtype=np.float32)
    q = _unpack_gguf(blocks[..., -BLOCK // 2 :])
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    record = np.concatenate(
        [d.astype(np.float32)[..., None].view(np.uint8), zero[..., None].view(np.uint8), packed],
        axis=-1,
    )
    return torch.from_numpy(np.ascontiguousarray(record))


def codes(record: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """A Q4 record's ``(q (N, K) uint8, scale (N, G) fp32, zero (N, G) fp32)``."""
    data = record.contiguous().numpy()
    n, groups, _ = data.shape
    scale = data[..., 0:4].copy().view(np.float32)[..., 0]
    zero = data[..., 4:8].copy().view(np.float32)[..., 0]
    packed = data[..., 8:]
    q = np.stack([packed & 15, packed >> 4], axis=-1).reshape(n, groups * BLOCK)
    return torch.from_numpy(q), torch.from_numpy(scale), torch.from_numpy(zero)


def make_record(q: Tensor, scale: Tensor, zero: Tensor) -> Tensor:
    """The record of ``(q (N, K), scale (N, G), zero (N, G))`` in groups of 32 (an int4
    linear's ``unpacked()``); the inverse of ``codes``."""
    n, k = q.shape
    groups = k // BLOCK
    if scale.shape != (n, groups) or zero.shape != (n, groups):
        raise ValueError(f"scale, zero: not the groups of 32 of a ({n}, {k}) weight")
    q8 = q.to(torch.uint8).reshape(n, groups, BLOCK)
    packed = q8[..., 0::2] | (q8[..., 1::2] << 4)
    sz = torch.stack([scale.float(), zero.float()], dim=-1).contiguous()
    return torch.cat([sz.view(torch.uint8), packed], dim=-1)


def int8_codes(record: Tensor) -> tuple[Tensor, Tensor]:
    """A Q8 record's ``(q (N, K) int8, scale (N, G) fp32)``."""
    data = record.contiguous().numpy()
    n, groups, _ = data.shape
    scale = data[..., 0:4].copy().view(np.float32)[..., 0]
    q = data[..., 4:].copy().view(np.int8).reshape(n, groups * BLOCK)
    return torch.from_numpy(q), torch.from_numpy(scale)


def make_q8_record(q: Tensor, scale: Tensor) -> Tensor:
    """The Q8 record of ``(q (N, K) int8, scale (N, G))`` in groups of 32; the inverse of
    ``int8_codes``."""
    n, k = q.shape
    groups = k // BLOCK
    if scale.shape != (n, groups):
        raise ValueError(f"scale: not the groups of 32 of a ({n}, {k}) weight")
    codes8 = q.to(torch.int8).reshape(n, groups, BLOCK).view(torch.uint8)
    return torch.cat([scale.float().contiguous()[..., None].view(torch.uint8), codes8], dim=-1)


def dequantize_record(record: Tensor) -> Tensor:
    """The fp32 ``(N, K)`` weight of a record (``dequantize_groups``; Q8: ``d * q``)."""
    if is_q8_record(record):
        q, scale = int8_codes(record)
        n, k = q.shape
        return (q.float().reshape(n, -1, BLOCK) * scale[..., None]).reshape(n, k)
    return dequantize_groups(*codes(record))


def _q8_blocks(record: Tensor) -> np.ndarray | None:
    """A Q8 record as Q8_0 bytes, or None where a scale is not an fp16 value."""
    q, scale = (t.numpy() for t in int8_codes(record))
    n, groups = scale.shape
    d = scale.astype(np.float16)
    if not np.array_equal(d.astype(np.float32), scale):
        return None
    parts = [d[..., None].view(np.uint8), q.reshape(n, groups, BLOCK).view(np.uint8)]
    return np.concatenate(parts, axis=-1).reshape(n, groups * _BLOCK_BYTES["Q8_0"])


def to_blocks(record: Tensor, qtype: str) -> np.ndarray | None:
    """A record as ``qtype`` (Q4_0/Q4_1 for a Q4 record, Q8_0 for a Q8 one) bytes
    ``(N, G * block bytes)``, or None where a group has no exact block of that type (a
    record of the other kind; Q4_0: a zero other than 0; any: a scale, or
    ``m = zero - 8 * scale``, that fp16 does not hold)."""
    if is_q8_record(record) != (qtype == "Q8_0"):
        return None
    if qtype == "Q8_0":
        return _q8_blocks(record)
    q, scale, zero = (t.numpy() for t in codes(record))
    n, groups = scale.shape
    d = scale.astype(np.float16)
    if not np.array_equal(d.astype(np.float32), scale):
        return None
    parts = [d[..., None].view(np.uint8)]
    if qtype == "Q4_0":
        if np.any(zero != 0):
            return None
    else:
        wanted = zero.astype(np.float64) - 8 * scale.astype(np.float64)
        m = wanted.astype(np.float16)
        if not np.array_equal(m.astype(np.float64), wanted):
            return None
        parts.append(m[..., None].view(np.uint8))
    parts.append(_pack_gguf(q.reshape(n, groups, BLOCK)))
    return np.concatenate(parts, axis=-1).reshape(n, groups * _BLOCK_BYTES[qtype])
