"""Every random number generator a training step draws from, saved and restored for an
exact resume: torch's CPU (and CUDA) generators, Python's ``random`` and numpy's.

Torch states are uint8 tensors (``attnkit.checkpoints`` stores them in
safetensors); the Python and numpy states are plain numbers (stored as JSON).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import numpy as np
import torch
from torch import Tensor

from attnkit.errors import CheckpointError


class NumpyRNGState(TypedDict):
    """numpy's legacy global generator (``np.random.get_state(legacy=False)``), as JSON."""

    bit_generator: str
    key: list[int]
    pos: int
    has_gauss: int
    gauss: float


class RNGState(TypedDict):
    """What ``capture_rng_state`` returns."""

    torch: Tensor  # uint8
    python: tuple[object, ...]  # random.getstate(): (version, internal state, gauss_next)
    numpy: NumpyRNGState
    cuda: NotRequired[list[Tensor]]  # one per device, when CUDA is available


def capture_rng_state() -> RNGState:
    """Every RNG a training step may draw from: torch CPU (and CUDA), ``random``, numpy.

    Torch states are uint8 tensors (stored in safetensors by ``save_checkpoint``);
    the Python and numpy states are plain numbers (stored as JSON).
    """
    np_state = np.random.get_state(legacy=False)
    state: RNGState = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": [int(x) for x in np_state["state"]["key"]],
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
    }
    if torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Undo ``capture_rng_state``. CUDA states restore onto as many devices as
    both sides have (none when resuming a GPU run on the CPU)."""
    try:
        torch.set_rng_state(state["torch"].to("cpu", torch.uint8))
        version, internal, gauss_next = state["python"]
        random.setstate((version, tuple(internal), gauss_next))
        np_state = state["numpy"]
        np.random.set_state(
            {
                "bit_generator": np_state["bit_generator"],
                "state": {
                    "key": np.asarray(np_state["key"], dtype=np.uint32),
                    "pos": np_state["pos"],
                },
                "has_gauss": np_state["has_gauss"],
                "gauss": np_state["gauss"],
            }
        )
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"rng state: cannot restore ({e})") from e
    cuda_states = state.get("cuda") or []
    if cuda_states and torch.cuda.is_available():
        for device, cuda_state in enumerate(cuda_states[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state.to("cpu", torch.uint8), device)
