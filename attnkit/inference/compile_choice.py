"""``--compile auto``: the compiled decode step where it is the faster on this machine.

Whether a compiled decode step (``attnkit.decoding.static``: inductor's C++
wrapper, frozen weights) beats the eager one depends on the machine and the
precision: on a 2-core AMD EPYC, before inductor's GEMM templates were timed in,
SmolLM2-135M decoded 1.6x faster compiled at int4, 1.3x at int8 and 0.5x at fp32
(``bench/NOTES.md``), where the eager fp32 step's oneDNN-packed GEMVs beat MKL's;
another CPU or model can turn any of these around. So ``auto`` times both here,
once: a copy of the model converted as each plan says (the eager plan's linears,
the compiled plan's), a prompt of ``PROMPT`` tokens then ``STEPS`` greedy
one-token steps at the plan's rows, after a warm-up pass (which, compiled, is
the compile), and keeps the faster (``attnkit.kernels.machine_choice``,
``CACHE/cpu_compiled_step.json``) under the CPU's model name, torch's version,
the thread count, the model's parameter shapes and dtypes, the precision and the rows.

The first ``auto`` run of a model on a machine pays the compile (one to two
minutes on 2 cores) even where eager wins; later runs read the answer (and,
compiled, reuse inductor's on-disk cache of the kernels). A step that does not
compile counts as eager. ``$ATTNKIT_COMPILE`` = ``compiled`` or ``eager`` skips
the measurement (benchmarks, tests).
"""

from __future__ import annotations

import copy
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from attnkit.decoding.static import StaticCacheStepper
from attnkit.errors import UsageError
from attnkit.inference.conversion import StepPlan, convert_weights, plan_stepper
from attnkit.kernels import machine_choice
from attnkit.kernels.machine_choice import ChoiceCache, best_time, machine_key

CACHE_FILE = "cpu_compiled_step.json"
ENV = "ATTNKIT_COMPILE"
CHOICES = ("compiled", "eager")
PROMPT = 8  # tokens of the timed prompt (read eagerly either way)
STEPS = 32  # one-token steps timed per pass
# Calibrated conversions need the tokenizer; for a timing the same kernels uncalibrated do.
_UNCALIBRATED = {"int8-smooth": "int8", "int4-awq": "int4"}


@dataclass(frozen=True)
class CompileChoice:
    """What ``choose`` picked and why.

    Attributes:
        compiled: whether the compiled step is the faster here.
        speedup: the eager pass's time / the compiled pass's (> 1: compiled is
            faster); ``None`` when read from the cache or the environment.
        seconds: how long the measurement took, compiling included (0 when cached).
    """

    compiled: bool
    speedup: float | None = None
    seconds: float = 0.0

    def describe(self) -> str:
        name = "compiled" if self.compiled else "eager"
        if self.speedup is None:
            return f"--compile auto: {name} decode step (chosen before, or by ${ENV})"
        return (f"--compile auto: {name} decode step (compiled {self.speedup:.2f}x eager's "
                f"speed here; measured in {self.seconds:.0f} s)")  # fmt: skip


def _key(model: nn.Module, plan: StepPlan) -> str:
    shapes = (f"{name}:{tuple(p.shape)}:{p.dtype}" for name, p in model.named_parameters())
    return machine_key([f"precision={plan.precision}", f"rows={plan.rows}", *shapes])


@torch.no_grad()
def step_time(model: nn.Module, plan: StepPlan, positions: int | None = None) -> tuple[float, bool]:
    """Seconds of a pass (a ``PROMPT``-token prompt, then ``STEPS`` greedy steps, the
    plan's rows) on a copy of ``model`` converted and stepped as ``plan`` says, after a warm-up
    pass; and whether a compiled step fell back to eager (then it does not count).

    ``positions`` (the run's prompt + new tokens, if known) sizes the static cache as the
    run's will be: the compiled programs, and inductor's on-disk kernels and GEMM
    timings, are then the run's own, so the run compiles again in seconds, not minutes."""
    twin = convert_weights(copy.deepcopy(model), precision=plan.precision, weights=plan.weights,
                           linears=_UNCALIBRATED.get(plan.linears, plan.linears))  # fmt: skip
    step = plan_stepper(twin, plan)
    first = next(iter(model.parameters()))
    bos = int(getattr(model, "bos_id", 1))
    prompt = torch.full((plan.rows, PROMPT), bos, dtype=torch.long, device=first.device)

    max_steps = STEPS + 1 if positions is None else max(STEPS + 1, positions - PROMPT)

    def one_pass() -> None:
        state = step.start(prompt, max_steps=max_steps)
        tokens = prompt[:, -1]
        for _ in range(STEPS):
            logits, state = step.step(tokens, state)
            tokens = logits.argmax(-1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a failed compile: reported below
        seconds = best_time(one_pass)
    failed = isinstance(step, StaticCacheStepper) and step.fell_back
    return seconds, failed


def measure(
    model: nn.Module, eager: StepPlan, compiled: StepPlan, positions: int | None = None
) -> CompileChoice:
    """Time ``model`` as the ``eager`` and the ``compiled`` plans run it (module doc)."""
    start = time.perf_counter()
    eager_s, _ = step_time(model, eager, positions)
    compiled_s, failed = step_time(model, compiled, positions)
    speedup = eager_s / max(compiled_s, 1e-12)
    return CompileChoice(not failed and speedup > 1.0, speedup, time.perf_counter() - start)


def choose(
    model: nn.Module,
    eager: StepPlan,
    compiled: StepPlan,
    root: Path | None = None,
    *,
    positions: int | None = None,
) -> CompileChoice:
    """Compiled or eager for ``model`` on this machine: cached, else ``measure``d (at the
    run's ``positions``, if known: ``step_time``) and kept."""
    forced = os.environ.get(ENV, "auto")
    if forced in CHOICES:
        return CompileChoice(compiled=forced == "compiled")
    if forced != "auto":
        raise UsageError(f"${ENV}: expected compiled, eager or auto, got {forced!r}")
    cache = ChoiceCache(CACHE_FILE, CHOICES, root)
    key = _key(model, compiled)
    known = cache.get(key)
    if known is not None:
        return CompileChoice(compiled=known == "compiled")
    # judged before: a minute of compiling on 2 threads lifts the load average by itself
    busy = machine_choice.machine_busy()
    choice = measure(model, eager, compiled, positions)
    cache.put(key, "compiled" if choice.compiled else "eager", busy=busy)
    return choice
