"""Attention score functions: how much a query ``q`` matches each key ``k``.

Every score maps ``q`` ``(..., Tq, dq)`` and ``k`` ``(..., Tk, dk)`` to scores
``(..., Tq, Tk)``; the leading dims are ``(B,)`` for an RNN decoder or
``(B, h)`` inside multi-head attention. All are vectorised over positions.

========== ============================= =====================================
name       score(q, k_j)                 source
========== ============================= =====================================
dot        ``q . k_j``                   Luong et al. (2015), "dot"
scaled_dot ``q . k_j / sqrt(d)``         Vaswani et al. (2017), §3.2.1
general    ``q^T W k_j``                 Luong et al. (2015), "general"
additive   ``v^T tanh(W_q q + W_k k_j)`` Bahdanau et al. (2015), "concat"
location   ``(W_a q)_j``                 Luong et al. (2015), "location"
========== ============================= =====================================

The softmax, masking and weighted sum live in ``attend``
(``attnkit.attention.functional``); a score only scores. ``location`` ignores
the keys' contents (only their number matters), so it is for RNN decoders,
not multi-head attention.

Scores with a key-side projection (general, additive) can apply it once per
source sentence (``project_keys``) and then score from the projected keys
(``forward(q, pk, projected=True)``), which is what a step-by-step decoder
wants. For the others ``project_keys`` is the identity.

Shapes: ``B`` batch, ``h`` heads, ``Tq``/``Tk`` query/key lengths, ``d``
feature dims, ``A`` the additive score's hidden size.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnkit.errors import ConfigError
from attnkit.roles import Roles, projection

SCORES = ("dot", "scaled_dot", "general", "additive", "location")
# The scores that compare a query with key contents, so they fit multi-head attention.
KEY_SCORES = ("dot", "scaled_dot", "general", "additive")


def dot_score(q: Tensor, k: Tensor) -> Tensor:
    """``q . k``: ``(..., Tq, d)``, ``(..., Tk, d)`` -> ``(..., Tq, Tk)``."""
    return torch.matmul(q, k.transpose(-2, -1))


def scaled_dot_score(q: Tensor, k: Tensor) -> Tensor:
    """``q . k / sqrt(d)`` (§3.2.1): keeps the softmax out of its flat regions for large d."""
    return torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))


class Score(nn.Module):
    """Base class: ``forward(q, k, projected=False) -> (..., Tq, Tk)``."""

    def project_keys(self, k: Tensor) -> Tensor:
        """The key-side work that does not depend on the query (identity by default)."""
        return k

    def forward(self, q: Tensor, k: Tensor, *, projected: bool = False) -> Tensor:
        raise NotImplementedError


class DotScore(Score):
    """``q . k``, unscaled (Luong's "dot"); ``q`` and ``k`` must have the same size."""

    def forward(self, q: Tensor, k: Tensor, *, projected: bool = False) -> Tensor:
        return dot_score(q, k)


class ScaledDotScore(Score):
    """``q . k / sqrt(d)``; ``attend`` runs it on the fused SDPA kernel."""

    def forward(self, q: Tensor, k: Tensor, *, projected: bool = False) -> Tensor:
        return scaled_dot_score(q, k)


class GeneralScore(Score):
    """``q^T W k`` with ``W`` ``(dq, dk)`` (Luong's "general"), unscaled.

    One ``W`` serves every leading dim, so inside multi-head attention it is
    shared across heads. A per-head ``W`` would add no expressiveness there:
    each head's query projection could absorb it (``(W_q^h x)^T W = (W^T W_q^h
    x)^T``), so sharing keeps ``d_head^2`` parameters instead of ``h d_head^2``.
    """

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(query_dim, key_dim))
        nn.init.xavier_uniform_(self.weight)

    def project_keys(self, k: Tensor) -> Tensor:
        """``W k`` ``(..., Tk, dq)``: with it, the score is a plain dot product."""
        return torch.matmul(k, self.weight.transpose(0, 1))

    def forward(self, q: Tensor, k: Tensor, *, projected: bool = False) -> Tensor:
        pk = k if projected else self.project_keys(k)
        return dot_score(q, pk)


class AdditiveScore(Score):
    """``v^T tanh(W_q q + W_k k)`` (Bahdanau's alignment model, Luong's "concat").

    ``W_q q + W_k k`` is ``W [q; k]`` with ``W = [W_q, W_k]``, split so the
    two halves broadcast: ``(..., Tq, 1, A) + (..., 1, Tk, A)`` gives every
    pair at once. That tensor is ``Tq * Tk * A`` per row, the price of the
    additive form (Bahdanau et al. precompute ``W_k k``, as ``project_keys`` does).
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int, *, bias: bool = True):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=bias)
        self.key_proj = nn.Linear(key_dim, attn_dim, bias=False)  # one bias is enough
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def roles(self) -> Roles:
        """Where it is the attention (an RNN's): ``W_q`` is ``q``, ``W_k`` is ``k``
        (inside self-attention the owner declares them ``score`` first)."""
        return Roles((projection("query_proj", "q"), projection("key_proj", "k"),
                      projection("v", "score")))  # fmt: skip

    def project_keys(self, k: Tensor) -> Tensor:
        """``W_k k`` ``(..., Tk, A)``."""
        projected: Tensor = self.key_proj(k)
        return projected

    def forward(self, q: Tensor, k: Tensor, *, projected: bool = False) -> Tensor:
        pk = k if projected else self.project_keys(k)
        hidden = torch.tanh(self.query_proj(q).unsqueeze(-2) + pk.unsqueeze(-3))
        scores: Tensor = self.v(hidden)
        return scores.squeeze(-1)


class LocationScore(Score):
    """``W_a q`` over ``max_src_len`` source slots, cut to ``Tk`` (Luong's "location").

    The score ignores the keys' contents: the query alone says where to look.
    ``attend`` masks the padded slots before its softmax, so the result is
    ``softmax(W_a h_t)`` renormalised over the real source positions.
    """

    def __init__(self, query_dim: int, max_src_len: int):
        super().__init__()
        if max_src_len < 1:
            raise ConfigError(f"max_src_len: must be >= 1, got {max_src_len}")
        self.max_src_len = max_src_len
        self.proj = nn.Linear(query_dim, max_src_len)

    def roles(self) -> Roles:
        """``W_a`` reads the query alone: a score's weight, no projection of the stream."""
        return Roles((projection("proj", "score"),))

    def forward(self, q: Tensor, k: Tensor, *, projected: bool = False) -> Tensor:
        tk = k.size(-2)
        if tk > self.max_src_len:
            raise ValueError(
                f"max_src_len: the source has {tk} positions, the location score only "
                f"{self.max_src_len}; raise max_src_len or shorten the source"
            )
        scores: Tensor = self.proj(q)
        return scores[..., :tk]


def build_score(
    name: str,
    *,
    query_dim: int | None = None,
    key_dim: int | None = None,
    attn_dim: int | None = None,
    max_src_len: int | None = None,
) -> Score:
    """A score module by name: ``"dot" | "scaled_dot" | "general" | "additive" | "location"``.

    ``general`` needs ``query_dim`` and ``key_dim``; ``additive`` those and
    ``attn_dim`` (default ``query_dim``); ``location`` needs ``query_dim`` and
    ``max_src_len``.
    """
    if name not in SCORES:
        raise ConfigError(f"score: expected one of {', '.join(SCORES)}; got {name!r}")

    def need(field: str, value: int | None) -> int:
        if value is None:
            raise ConfigError(f"{field}: the {name!r} score needs it")
        return value

    if name == "dot":
        return DotScore()
    if name == "scaled_dot":
        return ScaledDotScore()
    if name == "general":
        return GeneralScore(need("query_dim", query_dim), need("key_dim", key_dim))
    if name == "additive":
        qd = need("query_dim", query_dim)
        return AdditiveScore(qd, need("key_dim", key_dim), attn_dim or qd)
    return LocationScore(need("query_dim", query_dim), need("max_src_len", max_src_len))
