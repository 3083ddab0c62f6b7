"""The masks of local (sliding-window) and block-sparse attention: a band plus a few
global tokens.

Patterns (True = may attend; queries are the *last* ``Tq`` of the ``Tk`` key
positions, so query ``i`` sits at position ``p = Tk - Tq + i``, as with a KV cache):

* band: key ``j`` with ``p - left <= j <= p + right``;
* sliding window of ``window`` keys: causal ``left = window - 1, right = 0``
  (the query and the ``window - 1`` keys before it, as Mistral's
  ``sliding_window``); bidirectional ``left = right = window // 2`` (Longformer,
  Beltagy et al. 2020, §3.1: "1/2 w tokens on each side");
* global tokens (Longformer §3.1; BigBird's ITC, Zaheer et al. 2020, §2): a
  global position attends to every key and every query attends to it; with
  ``causal`` both still respect causality (nobody sees the future).

``block_sparse_mask`` is the whole pattern as a dense ``(Tq, Tk)`` bool mask:
what ``local_attention``'s dense path attends with and what its chunked and flex
paths compute without building it (``attnkit.attention.local``).
``attnkit.attention.local`` re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "GlobalTokens",
    "band_mask",
    "block_sparse_mask",
    "global_positions",
    "sliding_window_mask",
    "window_extent",
]

GlobalTokens = int | Sequence[int] | Tensor | None
"""``n`` (the first ``n`` positions), explicit key positions, or ``None``."""


def window_extent(window: int, causal: bool) -> tuple[int, int]:
    """``(left, right)`` keys either side of a query for a window of ``window``."""
    if window < 1:
        raise ValueError(f"window: must be >= 1, got {window}")
    return (window - 1, 0) if causal else (window // 2, window // 2)


def _positions(
    num_queries: int,
    num_keys: int | None,
    device: torch.device | None,
    q_positions: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Query positions ``(Tq, 1)`` (given, else the last ``Tq`` keys) and keys ``(1, Tk)``."""
    num_keys = num_queries if num_keys is None else num_keys
    if q_positions is not None:
        if q_positions.shape != (num_queries,):
            raise ValueError(
                f"q_positions: expected ({num_queries},), got {tuple(q_positions.shape)}"
            )
        return q_positions[:, None], torch.arange(num_keys, device=q_positions.device)[None, :]
    if num_keys < num_queries:
        raise ValueError(f"num_keys: {num_keys} is fewer than the {num_queries} queries")
    qpos = torch.arange(num_keys - num_queries, num_keys, device=device)
    return qpos[:, None], torch.arange(num_keys, device=device)[None, :]


def band_mask(
    num_queries: int,
    num_keys: int | None = None,
    *,
    left: int,
    right: int,
    device: torch.device | None = None,
) -> Tensor:
    """``(Tq, Tk)``: True where ``p - left <= j <= p + right`` (``p`` the query's position)."""
    if left < 0 or right < 0:
        raise ValueError(f"left/right: must be >= 0, got left={left}, right={right}")
    return _band(*_positions(num_queries, num_keys, device), left, right)


def _band(qpos: Tensor, kpos: Tensor, left: int, right: int) -> Tensor:
    """The one band test: key ``j`` within ``[p - left, p + right]`` of query position ``p``."""
    rel = kpos - qpos
    return (rel >= -left) & (rel <= right)


def sliding_window_mask(
    num_queries: int,
    num_keys: int | None = None,
    *,
    window: int,
    causal: bool = False,
    device: torch.device | None = None,
) -> Tensor:
    """``(Tq, Tk)`` sliding-window mask; see ``window_extent`` for what ``window`` counts."""
    left, right = window_extent(window, causal)
    return band_mask(num_queries, num_keys, left=left, right=right, device=device)


def global_positions(
    global_tokens: GlobalTokens, num_keys: int, device: torch.device | None = None
) -> Tensor:
    """Sorted unique global key positions ``(g,)`` (long); errors name ``global_tokens``."""
    if global_tokens is None:
        return torch.zeros(0, dtype=torch.long, device=device)
    if isinstance(global_tokens, int):
        if not 0 <= global_tokens <= num_keys:
            raise ValueError(f"global_tokens: {global_tokens} is not in 0..{num_keys}")
        return torch.arange(global_tokens, device=device)
    pos: Tensor = torch.unique(torch.as_tensor(global_tokens, dtype=torch.long, device=device))
    if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= num_keys):
        raise ValueError(f"global_tokens: positions must be in 0..{num_keys - 1}, got {pos}")
    return pos


def block_sparse_mask(
    num_queries: int,
    num_keys: int | None = None,
    *,
    window: int,
    global_tokens: GlobalTokens = None,
    causal: bool = False,
    q_positions: Tensor | None = None,
    device: torch.device | None = None,
) -> Tensor:
    """``(Tq, Tk)``: sliding window, plus global rows and columns, then causality.

    ``q_positions`` ``(Tq,)`` (long) places the queries anywhere among the keys
    (a static cache's step, whose keys are its whole capacity); by default they
    are the last ``Tq`` keys.
    """
    num_keys = num_queries if num_keys is None else num_keys
    qpos, kpos = _positions(num_queries, num_keys, device, q_positions)
    mask = _band(qpos, kpos, *window_extent(window, causal))
    g = global_positions(global_tokens, num_keys, kpos.device)
    if g.numel():
        is_global_key = torch.isin(kpos, g)  # (1, Tk): every query sees these keys
        is_global_query = torch.isin(qpos, g)  # (Tq, 1): these queries see every key
        mask = mask | is_global_key | is_global_query
        if causal:
            mask = mask & (kpos <= qpos)
    return mask
