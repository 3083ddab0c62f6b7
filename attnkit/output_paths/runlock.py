"""The run-directory lock: one process at a time writes a run directory.

``RunLock(run_dir)`` takes an exclusive ``fcntl.flock`` on ``run_dir/.attnkit.lock``
and holds it until released (or the process ends). A second process that
tries to take it is refused at once (``LOCK_NB``) with a one-line
``RunLockedError`` naming the holder's PID, so two ``train --resume`` runs
cannot interleave steps in ``metrics.jsonl``, and an ``--overwrite`` cannot
delete the checkpoints of a run that is still going.

Why it cannot go stale: the kernel drops a ``flock`` when the last descriptor
closes, which includes a process killed by SIGKILL. The PID written into the
file is informational (it names the holder in the error); a leftover file from
a killed run is simply locked again by the next run. The file is never removed:
removing a lock file while another process has it open would let two
processes lock two different files of the same name. (POSIX only: where there
is no ``fcntl``, Windows, runs are not locked.)
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from types import TracebackType

from attnkit.errors import AttnkitError

LOCK_FILE = ".attnkit.lock"


class RunLockedError(AttnkitError):
    """Another process holds the run directory (exit code 1)."""


def _holder(path: Path) -> str:
    try:
        pid = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeError):
        pid = ""
    return f"PID {pid}" if pid.isdigit() else "another process"


def _refusal(run_dir: Path, option: str, lock: Path) -> RunLockedError:
    where = f"{option} {run_dir}" if option else str(run_dir)
    return RunLockedError(
        f"{where}: in use by another attnkit run ({_holder(lock)}, lock {lock.name}); "
        "wait for it to finish or stop it, or choose another directory"
    )


try:
    import fcntl
except ImportError:  # not POSIX (Windows): no flock, so runs are not locked there
    fcntl = None  # type: ignore[assignment]


def _try_lock(fd: int) -> bool:
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


class RunLock:
    """An exclusive lock on a run directory, held from ``acquire`` to ``release``.

    Use as a context manager, or call ``acquire()`` and let process exit
    release it. ``option`` (``--out``) names the directory in the refusal.
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, option: str = "--out") -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.option = option
        self._fd: int | None = None
        self._announced = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, announce: bool = True) -> RunLock:
        """Take the lock (the directory must exist); ``RunLockedError`` if another holds it.

        ``announce=False`` takes it without writing the PID (see ``announce``), for a
        command that may still be refused: a refused command changes nothing on disk.
        """
        if self._fd is not None:
            if announce:
                self.announce()
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if not _try_lock(fd):
                raise _refusal(self.run_dir, self.option, self.path)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        if announce:
            self.announce()
        return self

    def announce(self) -> None:
        """Write this process's PID into the held lock file (named in other runs'
        refusals); once the command has passed its checks and starts writing."""
        if self._fd is None or self._announced:
            return
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._announced = True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._announced = False
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def refuse_if_locked(run_dir: str | os.PathLike[str], option: str = "--out") -> None:
    """``RunLockedError`` if a live process holds ``run_dir``'s lock; changes nothing.

    For commands that replace a directory wholesale (``average``, ``export``,
    ``import`` with ``--overwrite``): the lock file is opened read-only and
    only tested, never created or written.
    """
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return  # no lock file (or unreadable): no run has held this directory
    try:
        if not _try_lock(fd):
            raise _refusal(Path(run_dir), option, path)
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
