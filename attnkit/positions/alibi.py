"""ALiBi: attention with linear biases (Press et al., 2022, "Train Short, Test Long").

No position embeddings at all: each head ``h`` adds ``-m_h * (i - j)`` to the
score of query ``i`` on key ``j`` (§3), a penalty growing linearly with the
distance, with a fixed head-specific slope ``m_h``. The bias is a
``(h, Tq, Tk)`` float tensor that goes to ``F.scaled_dot_product_attention``
as its additive ``attn_mask`` (masked entries set to ``-inf``), so the fused
kernel is kept and no Python loop over heads is ever run.

**Slopes** (§3): for ``n`` heads, a power of two, the geometric sequence
``2^(-8/n), 2^(-16/n), ..., 2^(-8)``: start and ratio ``2^(-8/n)``. For other
``n`` the reference implementation (``get_slopes`` in ofirpress/attention_with_linear_biases)
takes the ``2^floor(log2 n)`` slopes of the closest smaller power of two, then
every other slope of the next power of two (``2 * 2^floor(log2 n)``) until
``n`` slopes are reached.

Shapes: ``h`` heads, ``Tq``/``Tk`` query/key positions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def _power_of_two_slopes(n: int) -> Tensor:
    """``2^(-8 k / n)`` for ``k = 1 .. n``, float64."""
    return torch.exp2(-8.0 * torch.arange(1, n + 1, dtype=torch.float64) / n)


def alibi_slopes(num_heads: int, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """``(h,)`` per-head slopes, head 0 steepest (see the module doc)."""
    if num_heads < 1:
        raise ValueError(f"num_heads: must be >= 1, got {num_heads}")
    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = _power_of_two_slopes(closest)
    if closest != num_heads:
        extra = _power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
        slopes = torch.cat((slopes, extra))
    return slopes.to(dtype)


def alibi_bias(
    num_heads: int | Tensor,
    q_positions: Tensor,
    k_positions: Tensor,
    *,
    causal: bool = True,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Additive score bias ``(h, Tq, Tk)``: ``-m_h * (i - j)``.

    Args:
        num_heads: ``h``, or the slopes ``(h,)`` themselves (computed once by
            the caller and kept on the device).
        q_positions: long ``(Tq,)``, e.g. ``pos .. pos + t - 1`` for a cached
            step (a device tensor for a static cache: no host sync).
        k_positions: long ``(Tk,)``, usually ``0 .. Tk - 1``.
        causal: ``-m (i - j)`` as in the paper's causal LM (future keys, which
            the causal mask removes anyway, get a positive bias); ``False``
            gives the symmetric ``-m |i - j|`` used for bidirectional encoders.
        dtype: of the result; match the queries' dtype for SDPA.

    Returns:
        ``(h, Tq, Tk)``; broadcasts against the ``(B, h, Tq, Tk)`` scores.
        Combine with a boolean mask as ``bias.masked_fill(~mask, -inf)``.
    """
    slopes = alibi_slopes(num_heads, dtype=dtype) if isinstance(num_heads, int) else num_heads
    if slopes.dim() != 1:
        raise ValueError(f"num_heads: slopes must be (h,), got {tuple(slopes.shape)}")
    if q_positions.dim() != 1 or k_positions.dim() != 1:
        raise ValueError(
            f"q_positions/k_positions: expected 1-D, got {tuple(q_positions.shape)} "
            f"and {tuple(k_positions.shape)}"
        )
    distance = (q_positions[:, None] - k_positions[None, :]).to(dtype)  # (Tq, Tk)
    if not causal:
        distance = distance.abs()
    return -slopes.to(device=distance.device, dtype=dtype)[:, None, None] * distance


class ALiBi(nn.Module):
    """One attention layer's ALiBi: its heads' slopes, and the bias at given positions.

    The slopes are a non-persistent buffer (a function of ``h``, not weights:
    nothing enters the state dict); they follow the module to its device.
    """

    slopes: Tensor

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    def forward(self, q_positions: Tensor, num_keys: int, dtype: torch.dtype) -> Tensor:
        """``(h, Tq, Tk)``: ``-m_h |i - j|`` for queries at ``q_positions`` ``(Tq,)`` over keys
        ``0 .. Tk - 1``.

        Symmetric (``causal=False`` in ``alibi_bias``): for a causal layer the
        keys past a query are masked anyway, so this is the paper's
        ``-m_h (i - j)`` wherever it counts, and one bias serves encoders too.
        """
        keys = torch.arange(num_keys, device=q_positions.device)
        return alibi_bias(self.slopes, q_positions, keys, causal=False, dtype=dtype)

    def extra_repr(self) -> str:
        return f"num_heads={self.slopes.numel()}"
