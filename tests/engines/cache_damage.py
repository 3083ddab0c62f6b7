"""Damage done to an engine cache, as a hostile or unlucky user would, and a watchdog.

Each ``DAMAGE`` entry changes a built cache directory and returns the reason
``engines_verify.check`` must give (a substring of it). ``file`` names the
model file to damage (``model/model.bin`` for CTranslate2, ...).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class Hung(BaseException):
    """Raised by the watchdog: a BaseException, so no error boundary turns it into a line."""


@contextmanager
def watchdog(seconds: float = 120) -> Iterator[None]:
    """Fail a test that blocks (on a FIFO) instead of hanging the suite."""

    def fire(signum: int, frame: object) -> None:
        raise Hung(f"blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def fifo_manifest(cache: Path, file: str) -> str:
    _fifo(cache / "engine.json")
    return "engine.json is a FIFO"


def fifo_model(cache: Path, file: str) -> str:
    _fifo(cache / file)
    return f"{file} is a FIFO"


def socket_model(cache: Path, file: str) -> str:
    path = cache / file
    path.unlink()
    here = os.getcwd()
    os.chdir(path.parent)  # a socket's path is limited to 108 bytes: bind a relative one
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(path.name)
    finally:
        os.chdir(here)
    return f"{file} is a socket"


def device_model(cache: Path, file: str) -> str:
    import stat

    (cache / file).unlink()
    os.mknod(cache / file, 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # like /dev/zero
    return f"{file} is a character device"


def garbage_same_size(cache: Path, file: str) -> str:
    """Garbage of the same size, the mtime set back: only the ctime (and the bytes) tell."""
    path = cache / file
    st = path.stat()
    path.write_bytes(bytes(b ^ 0x5A for b in path.read_bytes()))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return f"{file} digest differs"


def truncated(cache: Path, file: str) -> str:
    path = cache / file
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[: size // 2])
    return f"{file} is {size // 2} bytes, {size} recorded"


def link_loop(cache: Path, file: str) -> str:
    (cache / file).unlink()
    (cache / file).symlink_to(cache / file)  # ELOOP if anything followed it
    return f"{file} is a symbolic link"


def model_dir_elsewhere(cache: Path, file: str) -> str:
    """``model/`` moved out of the cache and linked back (a copy of the same files)."""
    elsewhere = cache.parent.parent.parent / f"elsewhere-{cache.name}"
    shutil.move(cache / "model", elsewhere)
    (cache / "model").symlink_to(elsewhere, target_is_directory=True)
    return "model is a symbolic link"


def missing(cache: Path, file: str) -> str:
    (cache / file).unlink()
    return f"{file} is missing"


def extra_file(cache: Path, file: str) -> str:
    (cache / "model" / "extra.json").write_text("{}")
    return "model/extra.json is not part of the build"


def old_manifest(cache: Path, file: str) -> str:
    """A manifest of the same key written before contents were recorded."""
    import json

    manifest = json.loads((cache / "engine.json").read_text())
    del manifest["contents"]
    (cache / "engine.json").write_text(json.dumps(manifest))
    return "engine.json records no contents"


def cache_is_a_link(cache: Path, file: str) -> str:
    elsewhere = cache.parent.parent.parent / f"linked-{cache.name}"
    shutil.move(cache, elsewhere)
    cache.symlink_to(elsewhere, target_is_directory=True)
    return "it is a symbolic link"


_ALL = (fifo_manifest, fifo_model, socket_model, device_model, garbage_same_size, truncated,
        link_loop, model_dir_elsewhere, missing, extra_file, old_manifest,
        cache_is_a_link)  # fmt: skip
DAMAGE: dict[str, Callable[[Path, str], str]] = {f.__name__: f for f in _ALL}
