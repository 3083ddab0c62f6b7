"""The training speed switch, ``train.fast`` (``--no-fast`` on the CLI turns it off).

``auto`` (the default) is ``on`` when training on a CUDA device and ``off``
otherwise. ``on`` means, for a single-process run:

* ``torch.compile`` of the training forward (AOTAutograd compiles its backward);
* for the encoder-decoder Transformer, the chunked label-smoothed loss, which
  never holds the whole batch's ``(N, V)`` fp32 logits
  (``chunked_label_smoothed_cross_entropy``);
* the fused Adam/AdamW kernel (CUDA only).

Each of these gives the same loss and gradients as the plain path up to float
summation order (``tests/training/test_fast_paths.py``), so ``on`` is safe;
``auto`` leaves it off on the CPU because there compiling costs minutes and
the chunked loss's recomputed projection costs time. Under ``torchrun`` only
the fused optimizer applies (set ``train.compile: true`` to compile there too):
the chunked loss reads the output projection outside the wrapped forward,
which FSDP2 does not allow.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from attnkit.errors import TrainingError

FAST_MODES = ("auto", "on", "off")


def fast_enabled(mode: str, device: torch.device) -> bool:
    """Whether ``train.fast=mode`` turns the fast paths on for ``device``."""
    if mode not in FAST_MODES:
        raise ValueError(f"fast: expected one of {', '.join(FAST_MODES)}, got {mode!r}")
    return mode == "on" or (mode == "auto" and device.type == "cuda")


def is_compile_failure(exc: BaseException) -> bool:
    """True for errors raised by TorchDynamo or Inductor while compiling."""
    module = type(exc).__module__ or ""
    return module.startswith(("torch._dynamo", "torch._inductor"))


@contextmanager
def naming_compile_failures(active: bool) -> Iterator[None]:
    """Turn a TorchDynamo/Inductor error inside the block into ``compile_failed``'s line."""
    try:
        yield
    except Exception as exc:
        if active and is_compile_failure(exc):
            raise compile_failed(exc) from exc
        raise


def compile_failed(exc: BaseException) -> TrainingError:
    """The one-line error for a compile that failed on the first step."""
    first_line = (str(exc).strip().splitlines() or [""])[0][:200]
    return TrainingError(
        f"torch.compile failed on the first training step ({type(exc).__name__}: "
        f"{first_line}); rerun with --no-fast (train.fast=off, train.compile=false)"
    )
