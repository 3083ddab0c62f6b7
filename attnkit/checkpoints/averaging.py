"""Checkpoint averaging (§6.1): the element-wise mean of several checkpoints' weights."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from torch import Tensor

from attnkit.checkpoints.adapters import ADAPTER_FILE
from attnkit.checkpoints.files import MODEL_FILE
from attnkit.checkpoints.safe_files import load_tensors
from attnkit.errors import CheckpointError


def average_checkpoints(directories: Iterable[str | Path]) -> dict[str, Tensor]:
    """Element-wise mean of the model weights of several checkpoints (§6.1).

    The base model averaged the last 5 checkpoints (10-minute intervals), the
    big model the last 20. Float tensors are summed in fp64 and cast back to
    their dtype; other tensors (integer buffers) are taken from the last
    checkpoint. Tied keys stay tied. Key sets, shapes and dtypes must match.
    """
    paths = [Path(d) for d in directories]
    if not paths:
        raise CheckpointError("average_checkpoints: no checkpoint directories given")
    for path in paths:  # the mean of B and of A is not the mean of the updates B A
        if (path / ADAPTER_FILE).exists():
            raise CheckpointError(
                f"{path}: a LoRA checkpoint (adapters only); merge each one first "
                "(attnkit merge), then average the merged checkpoints"
            )
    first = load_tensors(paths[0] / MODEL_FILE)
    sums = {k: t.double() if t.is_floating_point() else t for k, t in first.items()}
    for directory in paths[1:]:
        state = load_tensors(directory / MODEL_FILE)
        _check_same_layout(first, state, directory)
        for key, t in state.items():
            if t.is_floating_point():
                sums[key] += t.double()
            else:
                sums[key] = t
    averaged: dict[str, Tensor] = {}
    by_identity: dict[int, Tensor] = {}  # keep tied keys pointing at one tensor
    for key, t in first.items():
        if id(t) not in by_identity:
            value = sums[key]
            by_identity[id(t)] = (
                (value / len(paths)).to(t.dtype) if t.is_floating_point() else value
            )
        averaged[key] = by_identity[id(t)]
    return averaged


def _check_same_layout(
    reference: Mapping[str, Tensor], state: Mapping[str, Tensor], directory: Path
) -> None:
    missing, unexpected = reference.keys() - state.keys(), state.keys() - reference.keys()
    if missing or unexpected:
        raise CheckpointError(
            f"{directory}: different parameters from the first checkpoint "
            f"(missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})"
        )
    for key, t in state.items():
        ref = reference[key]
        if t.shape != ref.shape or t.dtype != ref.dtype:
            raise CheckpointError(
                f"{directory}: {key} is {tuple(t.shape)} {t.dtype}, "
                f"the first checkpoint has {tuple(ref.shape)} {ref.dtype}"
            )
