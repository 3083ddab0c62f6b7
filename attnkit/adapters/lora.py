"""``LoRALinear``: a frozen linear plus low-rank updates of row slices of its output.

``y = base(x) + (alpha / r) [B_1 A_1 x; ...]`` where each adapter ``i`` owns
the output rows ``start_i .. stop_i`` of the base weight (Hu et al., 2021,
§4.1). One slice covering every row is plain LoRA. Several slices adapt parts
of a fused projection: self-attention's ``qkv_proj`` holds the query, key and
value rows ``q | k | v`` in one matrix, and a target of ``q`` and ``v`` adapts
the first and last blocks only, leaving the key rows exactly as they were
(loralib's ``MergedLinear`` does the same with ``enable_lora=[True, False, True]``).

The module *receives* the base linear (an ``nn.Linear``, or a subclass such
as the trainer's oneDNN one) and never changes it; ``attnkit.adapters.install``
puts a ``LoRALinear`` in the base's place by name and ``merge`` puts a plain
``nn.Linear`` holding ``W + (alpha / r) B A`` back.

Computation: the adapters' ``A`` matrices are stacked, so ``x`` is read once
(``(..., in) -> (..., n r)``); the ``B`` matrices form one ``(out, n r)``
block matrix with zero rows where no adapter writes. With ``n r`` at most a
few dozen against ``in`` of hundreds, the adapter costs ~``2 n r / in`` of
the base product.

Shapes: ``x`` ``(..., in)``; ``A_i`` ``(r, in)``; ``B_i`` ``(stop_i - start_i, r)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class LoRALinear(nn.Module):
    """A frozen ``base`` linear plus one low-rank adapter per named row slice.

    Args:
        base: the pretrained linear (its parameters are frozen here).
        slices: adapter name (a role: ``"q"``, ``"v"``, ...) -> ``(start, stop)``
            output rows it updates; slices must not overlap.
        rank: ``r``.
        alpha: the update's scale is ``alpha / r``.
        dropout: dropout on the adapters' input.
    """

    def __init__(
        self,
        base: nn.Linear,
        slices: Mapping[str, tuple[int, int]],
        *,
        rank: int,
        alpha: float,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise ValueError(f"base: expected an nn.Linear, got {type(base).__name__}")
        weight = base.weight
        out_features, in_features = weight.shape
        if rank < 1:
            raise ValueError(f"rank: must be >= 1, got {rank}")
        ordered = sorted(slices.items(), key=lambda item: item[1][0])
        if not ordered:
            raise ValueError("slices: need at least one adapter")
        end = 0
        for name, (start, stop) in ordered:
            if not end <= start < stop <= out_features:
                raise ValueError(
                    f"slices: {name} rows {start}..{stop} overlap another slice or leave "
                    f"0..{out_features}"
                )
            end = stop
        for p in base.parameters():
            p.requires_grad_(False)
        self.base = base
        self.in_features, self.out_features = in_features, out_features
        self.rank, self.alpha, self.scaling = rank, alpha, alpha / rank
        self.slices = {name: (int(a), int(b)) for name, (a, b) in ordered}
        self.lora_A = nn.ParameterDict(
            {name: nn.Parameter(weight.new_empty(rank, in_features)) for name in self.slices}
        )
        self.lora_B = nn.ParameterDict(
            {
                name: nn.Parameter(weight.new_zeros(stop - start, rank))
                for name, (start, stop) in self.slices.items()
            }
        )
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``A`` as ``nn.Linear``'s default (Kaiming-uniform, a = sqrt(5)), ``B = 0``."""
        for a in self.lora_A.values():
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        for b in self.lora_B.values():
            nn.init.zeros_(b)

    def _stacked_a(self) -> Tensor:
        """Every adapter's ``A`` stacked: ``(n r, in)``."""
        a = list(self.lora_A.values())
        return a[0] if len(a) == 1 else torch.cat(a, dim=0)

    def _block_b(self) -> Tensor:
        """The ``(out, n r)`` matrix with ``B_i`` at rows ``slice_i``, columns ``i r ..``."""
        b: list[Tensor] = list(self.lora_B.values())  # ParameterDict values are untyped
        n, r = len(b), self.rank
        if n == 1 and self.slices[next(iter(self.slices))] == (0, self.out_features):
            return b[0]
        pieces, row = [], 0
        for i, (start, stop) in enumerate(self.slices.values()):
            if start > row:  # rows no adapter writes
                pieces.append(b[i].new_zeros(start - row, n * r))
            pieces.append(F.pad(b[i], (i * r, (n - 1 - i) * r)))
            row = stop
        if row < self.out_features:
            pieces.append(b[0].new_zeros(self.out_features - row, n * r))
        return torch.cat(pieces, dim=0)

    def delta_weight(self) -> Tensor:
        """``(alpha / r) B A`` ``(out, in)``, zero outside the adapted rows."""
        return (self._block_b() @ self._stacked_a()) * self.scaling

    @property
    def weight(self) -> Tensor:
        """The adapted weight ``W + (alpha / r) B A`` ``(out, in)``, differentiable in A and B.

        For code that reads a projection's weight rather than calling it
        (cross-attention slicing its fused ``qkv_proj``): it then computes the
        same function as ``forward``, at the cost of forming ``B A``.
        """
        return self.base.weight + self.delta_weight()

    @property
    def bias(self) -> Tensor | None:
        """The base's bias (adapters add none)."""
        return self.base.bias

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``(..., in)`` -> ``(..., out)``."""
        hidden = F.linear(self.dropout(x), self._stacked_a())  # (..., n r)
        base: Tensor = self.base(x)
        return base + F.linear(hidden, self._block_b()) * self.scaling

    @torch.no_grad()
    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` computing the same function (base weight plus the update)."""
        weight, bias = self.base.weight, self.bias
        linear = nn.Linear(
            self.in_features,
            self.out_features,
            bias=bias is not None,
            device=weight.device,
            dtype=weight.dtype,
        )
        linear.weight.copy_(weight + self.delta_weight().to(weight.dtype))
        if bias is not None:
            linear.bias.copy_(bias)
        return linear

    def extra_repr(self) -> str:
        slices = ", ".join(f"{k}={a}..{b}" for k, (a, b) in self.slices.items())
        return f"rank={self.rank}, alpha={self.alpha:g}, slices: {slices}"
