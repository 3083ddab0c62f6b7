"""Boolean attention masks. Convention everywhere: True = may attend.

Masks are shaped to broadcast against scores ``(B, h, Tq, Tk)``:

* padding masks are ``(B, 1, 1, Tk)`` (which keys are real),
* causal masks are ``(Tq, Tk)`` (query ``i`` sees keys ``<= i + offset``),
* combined masks are ``(B, 1, Tq, Tk)``.

A decoding state keeps its source mask as a ``PreparedMask`` (the bool mask
and its additive form, made once per decoding call); every attention backend
accepts either (``Mask``).
"""

from __future__ import annotations

from typing import NamedTuple

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


class PreparedMask(NamedTuple):
    """A bool key mask together with its additive form, made once per decoding call.

    A decoder passes the same source mask to every layer at every step; a
    kernel that adds the mask to the scores (``OneQueryDecode``) would
    otherwise rebuild its float form, and check for rows without any key,
    at each of those calls. The decoding state that owns the mask
    (``attnkit.models.state.DecoderState``) prepares it once with
    ``prepare_mask`` and keeps it across steps and reorders.

    Attributes:
        allowed: bool ``(B, 1, 1, S)``, True = may attend (what ``attend`` takes).
        additive: ``allowed`` as ``0`` / a large finite negative number, in the
            scores' dtype.
        has_key: bool ``(B, 1, 1, 1)``: rows that see at least one key (the
            others give zeros); ``None`` when every row does.
    """

    allowed: Tensor
    additive: Tensor
    has_key: Tensor | None

    def index_select(self, dim: int, index: Tensor) -> PreparedMask:
        """The rows ``index`` of every part (beam search following its beams)."""
        has_key = None if self.has_key is None else self.has_key.index_select(dim, index)
        return PreparedMask(
            self.allowed.index_select(dim, index), self.additive.index_select(dim, index), has_key
        )


Mask = Tensor | PreparedMask
"""A bool mask (True = may attend), or one prepared with its additive form."""


def additive_mask(mask: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``mask`` as an additive float tensor, and which rows see a key at all ``(..., 1)``.

    The most negative finite value (halved), not ``-inf``: a row with no key
    stays finite (uniform weights, zeroed afterwards) instead of NaN, and
    ``exp`` of it is 0. ``where`` builds it in float32, which a float64 floor
    would not fit.
    """
    floor = max(torch.finfo(dtype).min, torch.finfo(torch.float32).min) / 2
    return torch.where(mask, 0.0, floor).to(dtype), mask.any(dim=-1, keepdim=True)


def prepare_mask(mask: Tensor, dtype: torch.dtype) -> PreparedMask:
    """``mask`` with its additive form for scores of ``dtype`` (one host sync, for ``has_key``)."""
    additive, has_key = additive_mask(mask, dtype)
    return PreparedMask(mask, additive, None if bool(has_key.all()) else has_key)


def bool_mask(mask: Mask | None) -> Tensor | None:
    """The bool tensor of a mask, prepared or not."""
    return mask.allowed if isinstance(mask, PreparedMask) else mask
