"""Key-mapping tables between attnkit state dicts and other checkpoint formats.

A table is a list of ``(our_regex, their_template)`` pairs. Checkpoint names
are translated here and only here, so they never leak into the modules.
Every conversion reports keys it could not place (strict by default).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from attnkit.errors import CheckpointError

KeyTable = list[tuple[str, str]]


def rename_keys(
    state: Mapping[str, Tensor], table: KeyTable, *, strict: bool = True
) -> dict[str, Tensor]:
    """Rename ``state``'s keys through ``table``; unmatched keys raise (or are dropped)."""
    compiled = [(re.compile(f"^{pattern}$"), template) for pattern, template in table]
    out: dict[str, Tensor] = {}
    unmatched = []
    for key, value in state.items():
        for pattern, template in compiled:
            m = pattern.match(key)
            if m:
                out[m.expand(template)] = value
                break
        else:
            unmatched.append(key)
    if unmatched and strict:
        raise CheckpointError(f"keys with no mapping: {', '.join(unmatched[:8])}")
    return out


def check_keys(expected: set[str], got: set[str]) -> None:
    """Raise naming missing and unexpected keys, if any."""
    missing, unexpected = sorted(expected - got), sorted(got - expected)
    if missing or unexpected:
        raise CheckpointError(
            f"state dict mismatch: missing {missing[:8]}, unexpected {unexpected[:8]}"
        )
