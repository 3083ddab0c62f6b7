"""Progress that suits where it goes: a live bar on a terminal, plain lines in a log.

On a terminal, ``progress`` is tqdm's bar, redrawn in place. When stderr is a
file or a pipe (CI logs, ``nohup``, ``2> run.log``), a redrawn bar would write
thousands of carriage-return frames into the file; there ``progress`` writes one
plain line each time another ``every`` share of the total is done or ``seconds``
have passed, whichever comes first, with the elapsed time and an estimate of the
time left::

    step 1200/5000 (24%), 2m10s, about 6m51s left, loss=2.914 lr=3.1e-04

Both have the methods the training loop and the downloads use: ``update``,
``write``, ``set_postfix``, ``close``, ``reset`` and a settable ``total``.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Protocol


class Progress(Protocol):
    """What attnkit uses of a tqdm bar (``LineProgress`` and ``_Silent`` are ones too)."""

    total: float | None

    def update(self, n: int = 1) -> object: ...
    def write(self, message: str) -> object: ...
    def set_postfix(self, **values: object) -> object: ...
    def close(self) -> object: ...
    def reset(self, total: float | None = None) -> object: ...


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _amount(n: float, unit_scale: bool) -> str:
    if not unit_scale:
        return f"{int(n):,}"
    for prefix in ("", "k", "M", "G", "T"):
        if abs(n) < 1024 or prefix == "T":
            return f"{n:.1f}{prefix}" if prefix else f"{int(n)}"
        n /= 1024
    return f"{n:.1f}"


class LineProgress:
    """Plain progress lines for a file or pipe (see the module doc)."""

    def __init__(
        self,
        total: float | None,
        *,
        initial: float = 0,
        unit: str = "it",
        desc: str = "",
        unit_scale: bool = False,
        every: float = 0.05,
        seconds: float = 60.0,
        file: IO[str] | None = None,
    ) -> None:
        self.total, self.n, self.unit, self.desc = total, initial, unit, desc
        self.unit_scale, self.every, self.seconds = unit_scale, every, seconds
        self.file = file if file is not None else sys.stderr
        self._start = self._last_time = time.monotonic()
        self._first, self._last_share, self._shown = initial, self._share(), initial
        self._postfix = ""
        self._closed = False

    def _share(self) -> float:
        return self.n / self.total if self.total else 0.0

    def _line(self) -> str:
        elapsed = time.monotonic() - self._start
        head = f"{self.desc}: " if self.desc else ""
        done = f"{head}{self.unit} {_amount(self.n, self.unit_scale)}"
        if self.unit_scale:
            done = f"{head}{_amount(self.n, True)}{self.unit}"
        if self.total:
            total = _amount(self.total, self.unit_scale)
            done += f"/{total}{self.unit if self.unit_scale else ''} ({self._share():.0%})"
        parts = [done, _duration(elapsed)]
        progressed = self.n - self._first
        if self.total and progressed > 0 and self.n < self.total:
            parts.append(f"about {_duration(elapsed / progressed * (self.total - self.n))} left")
        if self._postfix:
            parts.append(self._postfix)
        return ", ".join(parts)

    def _emit(self) -> None:
        print(self._line(), file=self.file, flush=True)
        self._last_time, self._last_share, self._shown = time.monotonic(), self._share(), self.n

    def update(self, n: float = 1) -> None:
        self.n += n
        now = time.monotonic()
        if (self.total and self._share() - self._last_share >= self.every) or (
            now - self._last_time >= self.seconds
        ):
            self._emit()

    def write(self, message: str) -> None:
        # messages go where tqdm.write sends them (standard output), the progress to stderr
        print(message, file=sys.stdout, flush=True)

    def set_postfix(self, **values: object) -> None:
        self._postfix = " ".join(f"{k}={v}" for k, v in values.items())

    def close(self) -> None:
        if not self._closed and self.n != self._shown:
            self._emit()
        self._closed = True

    def reset(self, total: float | None = None) -> None:
        """Start counting again from 0 (a download that restarts), ``total`` if given."""
        if total is not None:
            self.total = total
        self.n = self._first = self._shown = 0
        self._last_share = 0.0


class _Silent:
    """``disable=True``: nothing shown, messages still written."""

    def __init__(self, total: float | None) -> None:
        self.total = total

    def update(self, n: float = 1) -> None:
        pass

    def write(self, message: str) -> None:
        print(message, file=sys.stdout, flush=True)

    def set_postfix(self, **values: object) -> None:
        pass

    def close(self) -> None:
        pass

    def reset(self, total: float | None = None) -> None:
        pass


def progress(
    total: float | None,
    *,
    initial: float = 0,
    unit: str = "it",
    desc: str = "",
    unit_scale: bool = False,
    disable: bool = False,
    leave: bool = True,
    file: IO[str] | None = None,
) -> Progress:
    """A bar on a terminal, plain lines elsewhere, nothing with ``disable``."""
    stream = file if file is not None else sys.stderr
    if disable:
        return _Silent(total)
    if stream.isatty():
        from tqdm.auto import tqdm

        return tqdm(
            total=total, initial=initial, unit=unit, desc=desc or None, unit_scale=unit_scale,
            unit_divisor=1024, leave=leave, dynamic_ncols=True, file=stream,
        )  # fmt: skip
    return LineProgress(total, initial=initial, unit=unit, desc=desc, unit_scale=unit_scale,
                        file=stream)  # fmt: skip
