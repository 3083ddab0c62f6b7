"""argparse ``type=`` functions for numbers as users type them, refused by option name.

argparse's own ``float`` accepts ``nan``, ``inf`` and ``1e999`` (which is
``inf``), and ``int`` accepts any size; the options then fail far from the
command line (``train.max_minutes: must be > 0, got nan`` for
``quickstart --minutes nan``) or overflow inside PyTorch. These types refuse
such values while the arguments are parsed, so the message names the option
(``argument --minutes: must be a finite number, got 'nan'``), exit code 2.
"""

from __future__ import annotations

import argparse
import math

# torch.manual_seed takes seeds below 2**64; the trainer derives seed + rank + step
# (and seed + 1), so seeds stay below 2**63 to leave that room.
SEED_LIMIT = 1 << 63
INT_LIMIT = 1 << 63  # any int option: beyond this, PyTorch's int64 sizes overflow


def finite_float(text: str) -> float:
    """A float that is not NaN and not infinite."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def integer(text: str) -> int:
    """An int within int64 (what PyTorch sizes and counts can hold)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not -INT_LIMIT <= value < INT_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range (at most 2**63 - 1)")
    return value


def seed(text: str) -> int:
    """A random seed: an int in [0, 2**63)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"a seed must be in [0, 2**63), got {text!r}")
    return value


def device(text: str) -> str:
    """``--device``: ``auto``, ``cpu``, or a CUDA (or MPS) device this machine has.

    Checked while parsing, so ``--device cuda`` on a machine without CUDA is
    one line naming the option instead of a traceback from deep inside PyTorch.
    """
    if text == "auto":
        return text
    import torch

    try:
        parsed = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(
            f"unknown device {text!r}; use auto, cpu, cuda or cuda:N"
        ) from None
    if parsed.type == "cpu":
        return text
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            built = "PyTorch was built without CUDA" if torch.version.cuda is None else "no GPU"
            raise argparse.ArgumentTypeError(
                f"{text!r}: CUDA is not available on this machine ({built}); use --device cpu"
            )
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            raise argparse.ArgumentTypeError(
                f"{text!r}: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}"
            )
        return text
    if parsed.type == "mps" and torch.backends.mps.is_available():
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r}: not available on this machine; use auto, cpu or a CUDA device"
    )
