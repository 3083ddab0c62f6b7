"""Token embeddings scaled by sqrt(d_model), plus positions and dropout (§3.4, §3.5)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnkit.positions import AbsolutePositions
from attnkit.roles import Roles


class TokenEmbedding(nn.Module):
    """``ids (B, T) -> (B, T, D)``, multiplied by ``sqrt(D)`` as in §3.4.

    Initialised with std ``D**-0.5`` so the scaled embeddings have unit
    variance, matching the positions' scale; the same matrix may also serve as
    the output projection (weight tying).
    """

    def __init__(self, vocab_size: int, d_model: int, *, scale: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        nn.init.normal_(self.weight, std=d_model**-0.5)
        # GPT-2, BERT and Llama do not scale; their weights expect scale=False.
        self.scale = math.sqrt(d_model) if scale else 1.0

    def roles(self) -> Roles:
        return Roles(parameters={"weight": "embedding"})

    def forward(self, ids: Tensor) -> Tensor:
        out = nn.functional.embedding(ids, self.weight)
        return out * self.scale if self.scale != 1.0 else out


class InputEmbedding(nn.Module):
    """Token embedding + absolute positions, then dropout (§5.4: "to the sums")."""

    def __init__(
        self,
        tokens: TokenEmbedding,
        positions: AbsolutePositions,
        dropout: float,
        *,
        norm: nn.Module | None = None,
    ):
        super().__init__()
        self.tokens = tokens
        self.positions = positions
        self.norm = norm  # BERT normalises the summed embeddings before dropout
        self.dropout = nn.Dropout(dropout)

    def roles(self) -> Roles:
        """All of it is the input embedding (its position table and BERT's norm too)."""
        return Roles(parameters={name: "embedding" for name, _ in self.named_parameters()})

    def forward(self, ids: Tensor, offset: int | Tensor = 0, extra: Tensor | None = None) -> Tensor:
        """``ids`` ``(B, T)`` at positions ``offset ..`` -> ``(B, T, D)``.

        ``offset`` is an ``int`` (checked against ``max_len``), or a ``(1,)``
        device tensor (a static cache's position: no host sync, nothing that
        makes a compiled step recompile; the cache checks the bound on the host),
        or ``(B, 1)``: each row's own (``attnkit.attention.ragged_cache``).
        ``extra`` ``(B, T, D)``: another input term added before the norm (BERT's
        token-type embeddings).
        """
        t = ids.size(1)
        if isinstance(offset, Tensor):
            pe = self.positions.at(offset + torch.arange(t, device=offset.device))
        else:
            pe = self.positions(t, offset)
        x: Tensor = self.tokens(ids) + pe
        if extra is not None:
            x = x + extra
        if self.norm is not None:
            x = self.norm(x)
        out: Tensor = self.dropout(x)
        return out
