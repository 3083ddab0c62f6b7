"""Choices of kernel that depend on the machine: timed once, kept in a small JSON cache.

No CPU kernel is fastest everywhere (issue 25: oneDNN's packed fp32 linears
trained and decoded faster than MKL's on an AMD EPYC, slower on an Intel Xeon
with AMX), so attnkit times the candidates on the machine it runs on and keeps
the answer: ``CACHE/NAME.json`` (``$ATTNKIT_CACHE_DIR``, see
``attnkit.data.cache``) maps a key to the chosen name. The key (``machine_key``)
is made of the CPU's model name, torch's version, the thread count and what
the caller adds (the model's parameter shapes, the row count): another machine,
torch or model measures again. Two users of it, beside it in this package:
training's ``train.cpu_matmul: auto`` (``matmul_choice``) and inference's fp32
linears (``fp32_choice``, which the inference plan consults).
A cache that cannot be read is empty; one that cannot be written is not an error.
A choice timed while the machine is oversubscribed (``machine_busy``) is used
for that run but not kept: under contention oneDNN's packed linears lost 2.8x
to MKL's at one row on an AMD EPYC where, idle, they win by 2.8x, and a kept
wrong answer would slow every later run.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from attnkit import jsonio
from attnkit.data.cache import default_root
from attnkit.errors import AttnkitError
from attnkit.output_paths.atomic import atomic_file


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s, else ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(parts: Iterable[str]) -> str:
    """A key for ``parts`` on this machine (CPU model, torch version, threads)."""
    digest = hashlib.sha256()
    digest.update(f"{cpu_name()}|{torch.__version__}|{torch.get_num_threads()}".encode())
    for part in parts:
        digest.update(f"|{part}".encode())
    return digest.hexdigest()[:32]


def machine_busy() -> bool:
    """More runnable tasks than CPUs over the last minute: a timing now says little."""
    try:
        return os.getloadavg()[0] > (os.cpu_count() or 1)
    except OSError:  # no load average on this platform: trust the timing
        return False


class ChoiceCache:
    """``CACHE/file``: key -> one of ``allowed`` (anything else in the file is ignored).

    Args:
        file: the file name under the cache root, e.g. ``"cpu_matmul.json"``.
        allowed: the names a choice may take.
        root: the cache root (default: ``attnkit.data.cache.default_root()``, read
            when used, so ``$ATTNKIT_CACHE_DIR`` set later still counts).
    """

    def __init__(self, file: str, allowed: Iterable[str], root: Path | None = None) -> None:
        self.file, self.allowed, self.root = file, frozenset(allowed), root

    @property
    def path(self) -> Path:
        return (self.root if self.root is not None else default_root()) / self.file

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): v for k, v in data.items() if v in self.allowed}

    def get(self, key: str) -> str | None:
        """The choice kept for ``key``, or ``None``."""
        return self._read().get(key)

    def put(self, key: str, choice: str, *, busy: bool | None = None) -> None:
        """Keep ``choice`` for ``key`` (best effort: never raises); not on a busy machine.

        ``busy``: whether the machine was busy when the timing began (a long timing's
        own threads raise the load average it would otherwise be judged by); default:
        ``machine_busy()`` now."""
        if machine_busy() if busy is None else busy:  # timed under contention: not kept
            return
        entries = self._read()
        entries[key] = choice
        try:
            with atomic_file(self.path, option=f"{self.file} cache") as tmp:
                tmp.write_text(jsonio.dumps(entries, indent=1, sort_keys=True), encoding="utf-8")
        except (AttnkitError, OSError):  # a path we may not write: measured again next time
            pass


def best_time(one_pass: Callable[[], None], *, repeats: int = 2, long_s: float = 1.0) -> float:
    """Seconds of ``one_pass``: a warm-up call, then the smallest of ``repeats`` timed calls.

    The warm-up lets oneDNN create its primitives and the allocator its blocks;
    a warm-up over ``long_s`` seconds is followed by one timed call only (long
    enough to be steady).
    """
    start = time.perf_counter()
    one_pass()
    best, n = float("inf"), 1 if time.perf_counter() - start > long_s else repeats
    for _ in range(n):
        start = time.perf_counter()
        one_pass()
        best = min(best, time.perf_counter() - start)
    return best
