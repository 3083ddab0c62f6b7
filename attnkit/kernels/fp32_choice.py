"""fp32 inference linears: oneDNN-packed or plain (MKL's sgemm), whichever this machine runs faster.

``--precision fp32`` used to pack every linear for oneDNN: ~2x MKL's GEMM rate
on the AMD EPYC this project measures on (``bench/NOTES.md``), but on an Intel
Xeon with AMX the packed path generated SmolLM2 at 0.83x transformers' speed,
which uses the plain linears (issue 25). So the fp32 conversion times both on
this machine first (``choose``): every linear ``quantize_model`` would convert,
in the model's order, applied to ``rows`` rows of random input (one pass
through all of them, so weights larger than the caches are read from memory as
in a real forward), plain and then packed; the faster of the two kept for the
whole model. ``rows`` is the row count the caller expects per product: 1 for a
language model generating for one user, beam x sentences for translation.

The choice is kept (``attnkit.kernels.machine_choice``, ``CACHE/cpu_fp32_linears.json``)
under the CPU's model name, torch's version, the thread count, the linears'
shapes and ``rows``: the next load of the model here reads it (measuring costs
a pass per variant, and the packed copies of the weights for its duration).
``$ATTNKIT_FP32_LINEARS`` = ``packed`` or ``plain`` skips the measurement and
takes that one (benchmarks comparing the two; the tests, which need to know).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from attnkit.errors import UsageError
from attnkit.kernels.machine_choice import ChoiceCache, best_time, machine_key
from attnkit.quantize.linear import PackedLinear
from attnkit.quantize.model import convertible_linears

CACHE_FILE = "cpu_fp32_linears.json"
ENV = "ATTNKIT_FP32_LINEARS"
CHOICES = ("packed", "plain")


@dataclass(frozen=True)
class Fp32Choice:
    """What ``choose`` picked and why.

    Attributes:
        packed: whether the oneDNN-packed linears are the faster here.
        speedup: the plain pass's time / the packed pass's (> 1: packed is faster);
            ``None`` when read from the cache.
        seconds: how long the measurement took (0 when cached).
    """

    packed: bool
    speedup: float | None = None
    seconds: float = 0.0

    def describe(self) -> str:
        name = "oneDNN-packed" if self.packed else "plain (MKL)"
        if self.speedup is None:
            return f"fp32 linears: {name} (chosen before, or by ${ENV})"
        return (f"fp32 linears: {name} (packed took {1 / self.speedup:.2f}x the plain "
                f"linears' time here; measured in {self.seconds:.1f} s)")  # fmt: skip


def _key(linears: list[nn.Linear], rows: int) -> str:
    shapes = (f"{m.in_features}x{m.out_features}:{m.bias is not None}" for m in linears)
    return machine_key([f"rows={rows}", *shapes])


@torch.no_grad()
def measure(linears: list[nn.Linear], rows: int) -> Fp32Choice:
    """Time one pass through ``linears`` at ``rows`` rows, plain then packed.

    Raises ``ValueError`` when ``rows`` < 1.
    """
    if rows < 1:
        raise ValueError(f"rows: expected >= 1, got {rows}")
    start = time.perf_counter()
    generator = torch.Generator().manual_seed(0)  # the caller's generators stay untouched
    inputs = [torch.randn(rows, m.in_features, generator=generator) for m in linears]

    def pass_of(layers: list[Callable[[torch.Tensor], torch.Tensor]]) -> Callable[[], None]:
        def one_pass() -> None:
            for layer, x in zip(layers, inputs, strict=True):
                layer(x)

        return one_pass

    plain = best_time(pass_of(list(linears)))
    packed = best_time(pass_of([PackedLinear(m.weight, m.bias) for m in linears]))
    return Fp32Choice(packed < plain, plain / max(packed, 1e-12), time.perf_counter() - start)


def choose(model: nn.Module, rows: int, root: Path | None = None) -> Fp32Choice:
    """The fp32 linears for ``model`` on this machine: cached, else ``measure``d and kept."""
    forced = os.environ.get(ENV, "auto")
    if forced in ("packed", "plain"):
        return Fp32Choice(packed=forced == "packed")
    if forced != "auto":
        raise UsageError(f"${ENV}: expected packed, plain or auto, got {forced!r}")
    linears = convertible_linears(model)
    if not linears:
        return Fp32Choice(packed=True, speedup=None)
    cache = ChoiceCache(CACHE_FILE, CHOICES, root)
    key = _key(linears, rows)
    known = cache.get(key)
    if known is not None:
        return Fp32Choice(packed=known == "packed")
    choice = measure(linears, rows)
    cache.put(key, "packed" if choice.packed else "plain")
    return choice
