"""Helpers shared by the benchmark scripts: batch, environment, timing, FLOPs, table.

The one timing core is here: ``time_step`` (one call, GPU-synchronised) and
``round_robin`` (every contender once per round), so every script measures
the same way. ``peak_flops`` measures the device's matmul peak in the same
run (for MFU) and ``count_flops`` counts a step's FLOPs once with
``torch.utils.flop_counter.FlopCounterMode``.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(REPO))

PAD, BOS, EOS = 0, 1, 2  # attnkit's default special ids


def make_batch(b: int, s: int, t: int, vocab: int, seed: int = 0) -> dict[str, Tensor]:
    """A random batch: ``src`` ``(b, s)``, ``tgt`` ``(b, t)`` (BOS-first) and ``labels`` ``(b, t)``.

    Every 10th row is shorter and right-padded, on both sides.
    """
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (b, s), generator=g)
    seq = torch.randint(3, vocab, (b, t + 1), generator=g)  # BOS w1 .. EOS, then shifted
    seq[:, 0] = BOS
    seq[:, -1] = EOS
    for row in range(0, b, 10):
        src[row, int(torch.randint(s // 2, s, (1,), generator=g)) :] = PAD
        n = int(torch.randint(t // 2, t, (1,), generator=g))
        seq[row, n] = EOS
        seq[row, n + 1 :] = PAD
    return {"src": src, "tgt": seq[:, :-1].contiguous(), "labels": seq[:, 1:].contiguous()}


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The matmul extensions the CPU kernels use: AMX tiles (bf16/int8), VNNI (int8 dot
# products: fbgemm, oneDNN), AVX512-BF16 (bf16 dot products: oneDNN, int8pack_mm).
CPU_FEATURES = ("amx_tile", "amx_bf16", "amx_int8", "avx512_vnni", "avx_vnni", "avx512_bf16")


def cpu_features() -> str:
    """``CPU_FEATURES`` this CPU has and lacks, from ``/proc/cpuinfo``'s flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "flags unknown"
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    flags = set(line.split(":", 1)[-1].split())
    return ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in CPU_FEATURES)


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1, 5, 15 min)"
    except OSError:
        return "n/a"


def environment(device: torch.device) -> dict[str, str]:
    """What a results row needs: device, versions, commit, date."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"{cpu_name()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    if _git("status", "--porcelain", "--", "attnkit", "bench"):
        commit += " + uncommitted changes in attnkit/ or bench/"
    env = {
        "device": name,
        "cpu features": cpu_features(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "commit": commit,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load average": load_average(),  # other processes on the machine skew CPU timings
    }
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    return env


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def round_robin(
    steps: dict[str, Callable[[], object]], rounds: int, device: torch.device
) -> dict[str, list[float]]:
    """Seconds per call of each step, timed one call of each per round.

    Interleaving spreads drift or load from other processes over every
    contender alike, instead of penalising whichever ran during it.
    """
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            times[name].append(time_step(step, device))
    return times


def peak_flops(device: torch.device, *, repeats: int | None = None) -> tuple[float, str]:
    """The best FLOP/s of a large square matmul in this run, and what it was.

    bf16 8192^3 on CUDA (the tensor-core peak that MFU is quoted against), fp32
    2048^3 on CPU; the best of ``repeats`` timings of a few back-to-back calls. On
    a shared CPU the "peak" is only what this run could get, so MFU there is rough.
    """
    cuda = device.type == "cuda"
    n, dtype, calls = (8192, torch.bfloat16, 20) if cuda else (2048, torch.float32, 2)
    repeats = repeats or (5 if cuda else 10)  # a shared CPU needs more tries for its best
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):  # warm-up (cuBLAS heuristics, clocks)
        a @ b
    sync(device)
    best = math.inf
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            a @ b
        sync(device)
        best = min(best, (time.perf_counter() - t0) / calls)
    del a, b
    name = str(dtype).replace("torch.", "")
    return 2 * n**3 / best, f"{name} matmul {n}x{n}x{n}, best of {repeats}"


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of one call of ``fn`` (matmuls, attention) as FlopCounterMode counts them."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def time_step(step: Callable[[], None], device: torch.device) -> float:
    """Seconds taken by one call of ``step``, waiting for the GPU on both sides."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    step()
    sync()
    return time.perf_counter() - t0


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, so the printed output can be pasted into docs/lab/results-history.md."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])
