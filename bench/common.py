"""Helpers shared by the benchmark scripts: batch, environment header, timing, table."""

from __future__ import annotations

import datetime
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
    """A Markdown table, so the printed output can be pasted into docs/results.md."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])
