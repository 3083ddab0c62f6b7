"""Boolean attention masks. Convention everywhere: True = may attend.

Masks are shaped to broadcast against scores ``(B, h, Tq, Tk)``:

* padding masks are ``(B, 1, 1, Tk)`` (which keys are real),
* causal masks are ``(Tq, Tk)`` (query ``i`` sees keys ``<= i + offset``),
* combined masks are ``(B, 1, Tq, Tk)``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Keys that are real tokens. ``ids`` ``(B, T)`` -> ``(B, 1, 1, T)``."""
    return (ids != pad_id)[:, None, None, :]


def causal_mask(
    num_queries: int, num_keys: int | None = None, *, device: torch.device | None = None
) -> Tensor:
    """Lower-triangular mask ``(Tq, Tk)``: query ``i`` may attend keys ``j <= i + (Tk - Tq)``.

    With ``Tk > Tq`` the queries are the *last* ``Tq`` positions (as when a
    KV cache holds earlier keys), so the diagonal is shifted accordingly.
    """
    num_keys = num_queries if num_keys is None else num_keys
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(
        num_keys - num_queries
    )


def causal_padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Causal and padding combined for decoder self-attention: ``(B, T)`` -> ``(B, 1, T, T)``."""
    t = ids.size(1)
    return causal_mask(t, device=ids.device) & padding_mask(ids, pad_id)
