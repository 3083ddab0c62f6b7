"""Checkpoints written by earlier attnkit versions, brought to today's state-dict keys.

One load-time upgrade, applied where checkpoint files are read
(``attnkit.checkpoints.files.load_checkpoint``), so every reader of a
checkpoint (``load_model``, a resumed run, ``train --init``) sees today's keys:

* cross-attention once had one fused ``cross_attn.qkv_proj`` ``(D + 2 h_kv d, D)``
  (queries, keys, values) and sliced it at every call; it now has ``q_proj``
  ``(D, D)`` and ``kv_proj`` ``(2 h_kv d, D)`` (``attnkit.attention.cross``).
  The split is exact: rows ``:D`` are the query projection, the rest the
  keys then the values, as before.

A state dict with nothing to upgrade comes back as it is (the same object).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

# Only cross-attention: self-attention keeps its fused qkv_proj.
_FUSED_CROSS = re.compile(r"(?P<prefix>(?:.*\.)?cross_attn\.)qkv_proj\.(?P<kind>weight|bias)")


def upgrade_state_dict(state: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
    """``state`` with every fused ``cross_attn.qkv_proj.{weight,bias}`` split into
    ``cross_attn.q_proj.*`` and ``cross_attn.kv_proj.*`` (key order kept)."""
    if not any(_FUSED_CROSS.fullmatch(key) for key in state):
        return state
    upgraded: dict[str, Tensor] = {}
    for key, value in state.items():
        m = _FUSED_CROSS.fullmatch(key)
        if m is None:
            upgraded[key] = value
            continue
        prefix, kind = m["prefix"], m["kind"]
        weight = state.get(f"{prefix}qkv_proj.weight")
        if weight is None or weight.dim() != 2:
            upgraded[key] = value  # not the layout this upgrade knows: left for the strict load
            continue
        d_model = weight.size(1)  # the query rows: the projection is (D + 2 h_kv d, D)
        upgraded[f"{prefix}q_proj.{kind}"] = value[:d_model]
        upgraded[f"{prefix}kv_proj.{kind}"] = value[d_model:]
    return upgraded
