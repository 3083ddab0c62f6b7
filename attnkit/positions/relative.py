"""Relative position representations (Shaw, Uszkoreit and Vaswani, 2018).

Self-attention learns two tables over the clipped relative distance
``r = clip(j - i, -k, k)`` (``k = max_relative_position``), ``2k + 1`` vectors
of the head dimension each, shared across heads:

    e_ij = (x_i W^Q) (x_j W^K + a^K_ij)^T / sqrt(d)
    z_i  = sum_j alpha_ij (x_j W^V + a^V_ij)

with ``a^K_ij = w^K[r + k]`` and ``a^V_ij = w^V[r + k]``. ``attend`` never
builds the ``(B, h, Tq, Tk, d)`` tensors of these formulas: it uses the paper's
efficient split (§3.3), see ``attnkit.attention.functional``. This module only
owns the two tables and the ``(Tq, Tk)`` index into them.

Queries are aligned to the *last* ``Tq`` keys (query ``i`` sits at position
``Tk - Tq + i``), as a cached decoder needs: keys are positions ``0 .. Tk - 1``.

Shapes: ``Tq``/``Tk`` query/key lengths, ``d`` head dim, ``R = 2k + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.roles import Roles


@dataclass(frozen=True)
class RelativePositionTerms:
    """What ``attend`` needs to add relative positions to one attention call.

    Attributes:
        index: long ``(Tq, Tk)`` in ``[0, R)``: ``clip(j - i, -k, k) + k``.
        key: ``(R, d)`` table ``w^K`` added to the keys, or ``None``.
        value: ``(R, d)`` table ``w^V`` added to the values, or ``None``.
    """

    index: Tensor
    key: Tensor | None
    value: Tensor | None

    @property
    def num_buckets(self) -> int:
        table = self.key if self.key is not None else self.value
        if table is None:
            raise ValueError("position: RelativePositionTerms needs a key or a value table")
        return table.size(0)


def relative_index(
    query_len: int,
    key_len: int,
    max_relative_position: int,
    *,
    offset: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """``clip(j - i, -k, k) + k`` as a long ``(Tq, Tk)`` tensor.

    Query ``i`` is at position ``offset + i`` (default ``Tk - Tq``: the queries
    are the last ``Tq`` positions) and key ``j`` at position ``j``.
    """
    if offset is None:
        offset = key_len - query_len
    k = max_relative_position
    q_pos = torch.arange(offset, offset + query_len, device=device)
    k_pos = torch.arange(key_len, device=device)
    return (k_pos[None, :] - q_pos[:, None]).clamp(-k, k) + k


class RelativePositions(nn.Module):
    """The learned ``w^K`` and ``w^V`` tables of one self-attention layer.

    Args:
        head_dim: ``d``, the size of each vector (shared across heads).
        max_relative_position: ``k``; distances beyond it are clipped.
        values: also learn ``w^V`` (the paper does); ``False`` keeps only the
            key term, which lets ``attend`` use the fused kernel with a bias.
    """

    def __init__(self, head_dim: int, max_relative_position: int = 16, *, values: bool = True):
        super().__init__()
        if max_relative_position < 1:
            raise ValueError(f"max_relative_position: must be >= 1, got {max_relative_position}")
        self.max_relative_position = max_relative_position
        buckets = 2 * max_relative_position + 1
        self.key = nn.Parameter(torch.empty(buckets, head_dim))
        self.value = nn.Parameter(torch.empty(buckets, head_dim)) if values else None
        self.reset_parameters()

    def roles(self) -> Roles:
        return Roles(parameters={"key": "relative_position", "value": "relative_position"})

    def reset_parameters(self) -> None:
        # Same scale as the token embeddings' init: a^K then perturbs q.k about
        # as much as a key does, without dominating it at the start.
        std = self.key.size(1) ** -0.5
        nn.init.normal_(self.key, std=std)
        if self.value is not None:
            nn.init.normal_(self.value, std=std)

    def forward(
        self,
        query_len: int,
        key_len: int,
        *,
        offset: int | None = None,
        device: torch.device | str | None = None,
    ) -> RelativePositionTerms:
        """The terms for ``Tq`` queries against ``Tk`` keys (see ``relative_index``)."""
        index = relative_index(
            query_len,
            key_len,
            self.max_relative_position,
            offset=offset,
            device=self.key.device if device is None else device,
        )
        return RelativePositionTerms(index=index, key=self.key, value=self.value)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.key.size(1)}, max_relative_position={self.max_relative_position}, "
            f"values={self.value is not None}"
        )


class NoPositions(nn.Module):
    """No absolute positions (a relative-only model): adds a scalar zero.

    Still enforces ``max_len`` so that every variant fails the same way on a
    too-long input.
    """

    zero: Tensor  # a 0-dim buffer

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("zero", torch.zeros(()), persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Returns a 0-dim zero (broadcasts against ``(B, T, D)``)."""
        if offset + length > self.max_len:
            raise ValueError(
                f"max_len: sequence of {offset + length} positions exceeds max_len={self.max_len}"
            )
        return self.zero

    def at(self, index: Tensor) -> Tensor:
        """A 0-dim zero, whatever the positions (broadcasts against ``(B, T, D)``)."""
        return self.zero
