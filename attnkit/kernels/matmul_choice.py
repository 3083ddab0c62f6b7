"""``train.cpu_matmul: auto``: oneDNN or MKL fp32 products, chosen by timing this model here.

Neither library is faster everywhere. On the AMD EPYC this project measures on,
oneDNN's fp32 GEMMs trained the Multi30k model 1.3x faster than MKL's sgemm,
but MKL won on MiniLM's short SST-2 rows; on an Intel Xeon with AMX, oneDNN's
path trained at 0.81x MKL's (issue 25). So ``auto`` does not guess: before
the first update it times one forward and backward pass of the first batch
with each (``measure``): a warm-up pass, then the smaller of two timed passes
(one when a pass takes over a second), and keeps the faster.

The pass runs in eval mode (no dropout) under a forked random generator, and
its gradients are dropped, so the run trains exactly as it would have with that
choice made up front. The choice is kept in ``CACHE/cpu_matmul.json``
(``$ATTNKIT_CACHE_DIR``, see ``attnkit.data.cache``) under a key made of the
CPU's model name, torch's version and thread count, and the model's parameter
names, shapes and trainability: the next run of the same model on the same
machine (a ``--resume`` above all, which must repeat the products bit for bit)
reads it instead of measuring. A cache that cannot be written is not an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from attnkit.kernels import onednn_linear
from attnkit.kernels.machine_choice import ChoiceCache, best_time, machine_key

CACHE_FILE = "cpu_matmul.json"
Backend = str  # "onednn" | "mkl"


@dataclass(frozen=True)
class MatmulChoice:
    """What ``auto`` picked and why.

    Attributes:
        backend: ``"onednn"`` or ``"mkl"``.
        speedup: MKL's pass time / oneDNN's (> 1: oneDNN is faster); ``None`` when cached.
        seconds: the time the measurement took (0 when cached).
    """

    backend: Backend
    speedup: float | None = None
    seconds: float = 0.0

    def describe(self) -> str:
        if self.speedup is None:
            return f"train.cpu_matmul auto: {self.backend} (chosen on this machine before)"
        return (f"train.cpu_matmul auto: {self.backend} (oneDNN's forward and backward took "
                f"{1 / self.speedup:.2f}x MKL's on this batch; measured in "
                f"{self.seconds:.1f} s)")  # fmt: skip


CHOICES = ("onednn", "mkl")


def model_key(model: nn.Module) -> str:
    """A key for this model's products on this machine (see the module doc)."""
    return machine_key(
        f"{name}:{tuple(p.shape)}:{p.requires_grad}" for name, p in model.named_parameters()
    )


def cached(model: nn.Module, root: Path | None = None) -> Backend | None:
    """The backend chosen before for this model on this machine, or ``None``."""
    return ChoiceCache(CACHE_FILE, CHOICES, root).get(model_key(model))


def remember(model: nn.Module, backend: Backend, root: Path | None = None) -> None:
    """Keep ``backend`` for this model on this machine (best effort: never raises)."""
    ChoiceCache(CACHE_FILE, CHOICES, root).put(model_key(model), backend)


def prepare(model: nn.Module, setting: str, *, cpu: bool, distributed: bool) -> tuple[bool, str]:
    """Put the products ``train.cpu_matmul`` asks for in ``model``.

    Returns whether to time both on the first batch (``auto``, a model not
    timed on this machine before) and a note for the log (``""``: none).
    ``cpu``: a CPU run whose forward is not compiled; under torchrun
    (``distributed``) ``auto`` is oneDNN, one rule for every rank.
    """
    if not cpu or setting == "mkl" or not onednn_linear.available():
        return False, ""
    known = None if distributed else cached(model)
    if setting == "onednn" or distributed or known == "onednn":
        onednn_linear.use_onednn_linear(model)  # the same parameters
    if setting == "auto" and not distributed and known is None:
        return True, ""
    return False, MatmulChoice(known).describe() if known else ""


def measure(model: nn.Module, one_pass: Callable[[], None]) -> MatmulChoice:
    """Time ``one_pass`` (a forward and backward of ``model``) on MKL, then on oneDNN.

    ``model`` holds plain ``nn.Linear`` layers when called; it is left with
    the faster backend's layers (``onednn_linear.use_onednn_linear`` or back to
    plain ones), in the training mode it had, with no gradients and the
    random generators as they were.
    """
    start, training = time.perf_counter(), model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=[]):
            mkl = best_time(one_pass)
            onednn_linear.use_onednn_linear(model)
            dnnl = best_time(one_pass)
    finally:
        model.train(training)
        for p in model.parameters():
            p.grad = None
    backend = "onednn" if dnnl < mkl else "mkl"
    if backend == "mkl":
        onednn_linear.use_plain_linear(model)
    return MatmulChoice(backend, mkl / dnnl, time.perf_counter() - start)


def choose(model: nn.Module, one_pass: Callable[[], None]) -> str:
    """``measure``, keep the choice for the next run of this model here; the note to print."""
    choice = measure(model, one_pass)
    remember(model, choice.backend)
    return choice.describe()
