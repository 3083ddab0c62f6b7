"""Rotary position embeddings (RoPE; Su et al., 2021, "RoFormer", §3.4).

RoPE rotates each query and key by an angle proportional to its position, so
the dot product ``q_m . k_n`` depends on the positions only through ``m - n``
(§3.4.2): relative position information with no learned table and no change
to the attention kernel.

**Pairing convention.** The head dim ``d`` holds ``d / 2`` two-dimensional
pairs, pair ``i`` rotating at frequency ``theta_i = base^(-2i / d)``. Two
layouts exist:

* *rotate half* (GPT-NeoX, Hugging Face Llama, this module): pair ``i`` is
  ``(x[i], x[i + d/2])``;
* *interleaved* (the paper, Meta's Llama, llama.cpp): pair ``i`` is
  ``(x[2i], x[2i + 1])``.

They are the same function up to a fixed permutation of each head's rows of
the q/k projections; that is exactly what llama.cpp's converter applies when
it writes a Hugging Face Llama into GGUF, and what ``attnkit.interop.gguf.read``
undoes. As complex numbers: with ``z_i = x[i] + 1j * x[i + d/2]``, the
rotated pair is ``z_i * exp(1j * m * theta_i)``.

**Precision.** Angles, cosines and sines are computed in float32 by default,
as Hugging Face Llama does (the weights were trained against those values);
pass ``dtype=torch.float64`` for exact references.

**Positions.** ``RotaryEmbedding(positions)`` gathers the cached table at any
long tensor of positions, with no host sync: the queries of a cached step at
``pos .. pos + t - 1``, or a static cache's device-side ``pos`` tensor.

Shapes: ``B`` batch, ``h`` heads, ``T`` positions, ``d`` head dim, ``L`` cache length.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def rotary_inverse_frequencies(
    head_dim: int, theta: float = 10000.0, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """``(d / 2,)`` frequencies ``theta_i = base^(-2i / d)`` (§3.2.2), computed as HF Llama does."""
    if head_dim < 2 or head_dim % 2 != 0:
        raise ValueError(f"head_dim: rotary embeddings need an even head dim, got {head_dim}")
    if theta <= 0:
        raise ValueError(f"rope_theta: must be > 0, got {theta}")
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=dtype) / head_dim))


def rotary_cos_sin(positions: Tensor, inv_freq: Tensor) -> tuple[Tensor, Tensor]:
    """``cos``, ``sin`` of shape ``positions.shape + (d,)``, in ``inv_freq``'s dtype.

    Both halves of the last dim repeat the ``d / 2`` angles (rotate-half layout).
    """
    angles = positions.to(inv_freq.dtype)[..., None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x: Tensor) -> Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the two halves of the last dim: multiplication by ``1j``."""
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate queries and keys: ``x * cos + rotate_half(x) * sin``.

    Args:
        q: ``(B, h, Tq, d)``; k: ``(B, h_kv, Tk, d)`` (grouped-query attention
            may have fewer key heads).
        cos, sin: broadcastable to both, e.g. ``(T, d)`` (every row at the same
            positions) or ``(B, 1, T, d)`` (per-row positions), as returned by
            ``RotaryEmbedding``. Cast to ``q``'s dtype first, as HF does.

    Returns:
        ``(q_rotated, k_rotated)``, same shapes and dtypes as ``q`` and ``k``.
        Pure: nothing is modified in place.
    """
    cos, sin = cos.to(q.dtype), sin.to(q.dtype)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class RotaryEmbedding(nn.Module):
    """Cached cos/sin tables for positions ``0 .. max_len - 1``.

    The tables are non-persistent buffers: they follow ``.to(device)`` but
    never enter a state dict (they are a function of the config).

    Args:
        head_dim: rotated dimension ``d`` (even); the whole head, as in Llama.
        theta: the base of the frequencies (``rope_theta``; 10000 in the
            paper, 500000 in Llama 3, 100000 in SmolLM2).
        max_len: positions cached (a model's ``max_len``: it never sees more).
        dtype: dtype the angles are computed and cached in (float32 by
            default, as HF Llama; float64 for exact references).
    """

    cos: Tensor
    sin: Tensor

    def __init__(
        self,
        head_dim: int,
        theta: float = 10000.0,
        max_len: int = 2048,
        *,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if max_len < 1:
            raise ValueError(f"max_len: must be >= 1, got {max_len}")
        rotary_inverse_frequencies(head_dim, theta)  # validates both
        self.head_dim = head_dim
        self.theta = float(theta)
        inv_freq = rotary_inverse_frequencies(head_dim, theta, dtype=dtype)
        cos, sin = rotary_cos_sin(torch.arange(max_len), inv_freq)
        self.register_buffer("cos", cos, persistent=False)  # (L, d)
        self.register_buffer("sin", sin, persistent=False)

    @property
    def max_len(self) -> int:
        return self.cos.size(0)

    def forward(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """``(cos, sin)`` at ``positions``, ready for ``apply_rotary``.

        Args:
            positions: long, ``(T,)`` (shared by the batch: a prompt at
                ``0 .. T-1``, a cached step at ``pos .. pos + t - 1``, a static
                cache's ``pos + arange(t)`` on the device) or ``(B, T)``
                (per-row positions, e.g. left-padded prompts). Every value
                must be ``< max_len``: this is not checked, because checking
                a device tensor would sync (the model's ``max_len`` bounds them).

        Returns:
            ``(T, d)`` each for ``(T,)`` positions, ``(B, 1, T, d)`` for
            ``(B, T)``; both broadcast against ``(B, h, T, d)``.
        """
        if positions.dim() not in (1, 2):
            raise ValueError(f"positions: expected (T,) or (B, T), got {tuple(positions.shape)}")
        cos, sin = self.cos[positions], self.sin[positions]
        if positions.dim() == 2:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return cos, sin

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, theta={self.theta:g}, max_len={self.max_len}"
