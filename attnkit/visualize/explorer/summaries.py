"""Per-head numbers and derived maps for the explorer, in numpy.

Shape legend: ``L`` layers, ``H`` heads, ``Tq`` query positions (rows),
``Tk`` key positions (columns). A map ``w[h, i, j]`` is how much query ``i``
attends to key ``j`` in head ``h``; rows usually sum to 1.

Distance and the diagonal
-------------------------
For self-attention (query and key are the same token list) query ``i`` sits
at key position ``i``: the distance of a cell is ``|i - j|`` and the diagonal
cell of row ``i`` is ``j = i``.

For cross-attention the two lists have different lengths, so the diagonal is
the straight line from the first to the last token of both, through cell
centres: row ``i`` maps to the key coordinate ``c_i = (i + 0.5) * Tk / Tq - 0.5``.
The distance of a cell is ``|j - c_i|`` (in key positions) and the diagonal
cell of row ``i`` is ``floor((i + 0.5) * Tk / Tq)``, the key cell holding
``c_i``. With ``Tq == Tk`` both reduce to the self-attention definitions.
"""

from __future__ import annotations

import numpy as np

__all__ = ["diagonal_positions", "head_summaries", "rollout"]


def diagonal_positions(
    n_query: int, n_key: int, *, same_axis: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Where the diagonal crosses each query row.

    Returns ``(centre (Tq,) float, cell (Tq,) int)``: the key coordinate used for
    distances and the key index used for the diagonal share. For self-attention
    the cell is ``i`` itself (``-1`` where ``i >= Tk``, so it scores 0).
    """
    i = np.arange(n_query, dtype=np.float64)
    if same_axis:
        cell = np.where(i < n_key, i, -1).astype(np.int64)
        return i, cell
    centre = (i + 0.5) * n_key / n_query - 0.5
    cell = np.minimum(np.floor((i + 0.5) * n_key / n_query), n_key - 1).astype(np.int64)
    return centre, cell


def head_summaries(weights: np.ndarray, *, same_axis: bool) -> dict[str, np.ndarray]:
    """Four numbers per head of one layer, each averaged over the query rows.

    Args:
        weights: ``(H, Tq, Tk)`` attention weights of one layer.
        same_axis: True when queries and keys are the same token list (self-attention).

    Returns:
        ``{"entropy", "distance", "diagonal", "first"}``, each ``(H,)`` float64:
        ``entropy`` is ``-sum_j w log w`` in nats (``0 log 0 = 0``);
        ``distance`` is ``sum_j w_ij |j - c_i|`` (see the module docstring);
        ``diagonal`` is the weight on the diagonal cell; ``first`` the weight on key 0.
    """
    w = np.asarray(weights, dtype=np.float64)
    _, n_query, n_key = w.shape
    safe = np.where(w > 0, w, 1.0)
    entropy = -(w * np.log(safe)).sum(-1).mean(-1)
    centre, cell = diagonal_positions(n_query, n_key, same_axis=same_axis)
    dist = np.abs(np.arange(n_key, dtype=np.float64)[None, :] - centre[:, None])  # (Tq, Tk)
    distance = (w * dist[None]).sum(-1).mean(-1)
    rows = np.arange(n_query)
    on_diag = np.where(cell >= 0, w[:, rows, np.maximum(cell, 0)], 0.0)  # (H, Tq)
    return {
        "entropy": entropy,
        "distance": distance,
        "diagonal": on_diag.mean(-1),
        "first": w[:, :, 0].mean(-1),
    }


def rollout(layer_averages: list[np.ndarray]) -> list[np.ndarray]:
    """Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow"), per layer.

    The residual connection is modelled by mixing each layer's head-averaged map
    with the identity, ``A_l = 0.5 W_l + 0.5 I``, rows renormalised to sum to 1;
    the rollout up to layer ``l`` is ``A_l @ A_{l-1} @ ... @ A_1``.

    Args:
        layer_averages: per layer ``(T, T)`` head-averaged self-attention.

    Returns:
        per layer ``(T, T)``: the rollout through the first ``l + 1`` layers.
        Rows that are all zero (masked queries) stay the identity row.
    """
    out: list[np.ndarray] = []
    acc: np.ndarray | None = None
    for w in layer_averages:
        w = np.asarray(w, dtype=np.float64)
        a = 0.5 * w + 0.5 * np.eye(w.shape[0])
        a = a / a.sum(-1, keepdims=True)  # >= 0.5 on the diagonal, never 0
        acc = a if acc is None else a @ acc
        out.append(acc)
    return out
