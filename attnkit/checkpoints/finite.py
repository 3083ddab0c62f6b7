"""Refuse weights holding NaN or infinity before anything trains on them.

A checkpoint whose tensors hold NaN (a diverged run saved by another tool, a
crafted file) makes every loss NaN: each update is skipped and the trainer
finally blames the learning rate, which was never the problem. Training from
such weights (``--init``) is refused at load instead, naming the file, the
first tensor holding a non-finite value and how many it holds.

Only floating-point tensors can hold such values; the scan reads each tensor
once (``torch.isfinite``), a fraction of a second for a model of a gigabyte.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from attnkit.errors import CheckpointError


def first_nonfinite(tensors: Mapping[str, Tensor]) -> tuple[str, int, int] | None:
    """``(name, non-finite count, size)`` of the first tensor, in name order, holding
    NaN or +-inf; ``None`` when every value is finite."""
    for name in sorted(tensors):
        tensor = tensors[name]
        if not torch.is_floating_point(tensor) or tensor.numel() == 0:
            continue
        finite = torch.isfinite(tensor)
        if not bool(finite.all()):
            return name, int((~finite).sum()), tensor.numel()
    return None


def check_finite(tensors: Mapping[str, Tensor], path: str | Path) -> None:
    """``CheckpointError`` naming ``path`` and the tensor when a weight is NaN or infinite."""
    found = first_nonfinite(tensors)
    if found is not None:
        name, bad, total = found
        raise CheckpointError(
            f"{path}: tensor {name} holds {bad:,} NaN or infinite values (of {total:,}); "
            "these weights cannot be trained from; start from a checkpoint saved before "
            "they diverged"
        )
