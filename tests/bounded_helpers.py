"""Hostile inputs for the bounded readers, made cheaply, and a child process under limits.

A gzip bomb is one small gzip member of 16 MiB of repeated bytes, written
again and again: concatenated members are one valid gzip file, so a 1 MiB
file that expands to 1 GiB costs one 16 MiB compression (about 0.1 s).
Every hostile input runs in a child process under an address-space limit
(``RLIMIT_AS``) and a time limit, so a reader that stops being bounded fails
its test instead of eating the machine.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).parents[1]

MEMBER_BYTES = 16 << 20  # one gzip member's text
# torch alone reserves about 0.65 GB of address space (measured: VmPeak of
# `import attnkit.data, torch`); 2 GiB leaves room for the CLI, and far less
# than a 1 GiB line read whole (plus its decoded copy) would need.
ADDRESS_SPACE_LIMIT = 2 << 30
SECONDS = 10.0  # the target for a bomb or a crafted file, in CPU seconds
PEAK_RSS = 1 << 30  # the target: under 1 GB resident
KILL_AFTER = 90  # wall seconds: a hang is killed here and fails the test


def gzip_bomb(path: Path, line: bytes, total: int = 1 << 30) -> Path:
    """A gzip file expanding to ``total`` bytes of ``line`` repeated (``b"a"``: one line)."""
    member = gzip.compress(line * (MEMBER_BYTES // len(line)), compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        for _ in range(total // MEMBER_BYTES):
            f.write(member)
    return path


def long_line(path: Path, size: int = 100 << 20) -> Path:
    """A plain file holding one line of ``size`` bytes and no newline."""
    chunk = b"a" * (1 << 20)
    with open(path, "wb") as f:
        for _ in range(size // len(chunk)):
            f.write(chunk)
    return path


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, resource.RLIM_INFINITY))


# Runs the command and records its peak RSS and CPU time (its own and its children's,
# so a shell pipeline counts whole) in the file named first.
_MEASURE = """\
import json, resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
code = 128 - code if code < 0 else code  # killed by a signal: the shell's convention
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as f:
    json.dump([usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime], f)
sys.exit(code)
"""


@dataclass
class Limited:
    returncode: int
    stdout: str
    stderr: str
    seconds: float  # wall time: inflated when the machine is shared
    cpu_seconds: float  # user + system time of the command and its children
    peak_rss: int  # bytes: the largest resident set of the command or a child

    @property
    def stderr_lines(self) -> list[str]:
        return self.stderr.splitlines()


def run_limited(
    argv: list[str], *, cwd: Path, stdin_path: Path | None = None, shell_stdin: str | None = None
) -> Limited:
    """``argv`` (``python ...``) in a child under ``ADDRESS_SPACE_LIMIT``; its stdin is
    ``stdin_path``, or the output of the shell command ``shell_stdin`` through a pipe."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    # Address space is reserved per thread (stacks, malloc arenas): keep the count
    # independent of the machine's cores, so the limit means the same everywhere.
    env.update(OMP_NUM_THREADS="1", RAYON_NUM_THREADS="2", MALLOC_ARENA_MAX="2")
    if shell_stdin is not None:
        argv = ["bash", "-c", f"{shell_stdin} | {shlex.join(argv)}"]
    with tempfile.TemporaryDirectory() as tmp:
        usage = Path(tmp) / "usage.json"
        measured = [sys.executable, "-c", _MEASURE, str(usage), *argv]
        start = time.perf_counter()
        with open(stdin_path or os.devnull, "rb") as stdin:
            child = subprocess.Popen(measured, cwd=cwd, env=env, stdin=stdin, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     errors="replace", preexec_fn=_limits,
                                     start_new_session=True)  # fmt: skip
            try:
                out, err = child.communicate(timeout=KILL_AFTER)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)  # the command too, not just the wrapper
                out, err = child.communicate()
                err += f"\n(killed after {KILL_AFTER} s)"
        seconds = time.perf_counter() - start
        peak, cpu = json.loads(usage.read_text()) if usage.exists() else (-1, -1.0)
    return Limited(child.returncode, out, err, seconds, cpu, peak)
