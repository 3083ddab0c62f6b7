"""Position-wise feed-forward network (§3.3): ``FFN(x) = W2 act(W1 x + b1) + b2``."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.roles import Roles, projection


def _gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")  # GPT-2's "gelu_new"


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": _gelu_tanh,
}


class FeedForward(nn.Module):
    """``(B, T, D) -> (B, T, D)`` through a hidden width ``d_ff``."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", bias: bool = True):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation: expected one of {sorted(ACTIVATIONS)}, got {activation!r}"
            )
        self.activation = ACTIVATIONS[activation]
        self.w1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w2 = nn.Linear(d_ff, d_model, bias=bias)

    def roles(self) -> Roles:
        return Roles((projection("w1", "ffn_in"), projection("w2", "ffn_out")))

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.activation(self.w1(x)))
