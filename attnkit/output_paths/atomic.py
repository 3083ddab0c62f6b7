"""Writing under the output-path policy: atomic files, staged directories, the swap.

A file is written to a hidden temporary beside its target and renamed over
it; a directory is built in a hidden temporary directory and swapped in with
two renames. Either way the target names the old contents or the new ones,
never half of them (see ``swap_directory`` for the crash windows).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from attnkit.errors import OutputError, UsageError
from attnkit.output_paths.policy import (
    PathLike,
    as_os_error,
    check_output_dir,
    check_output_file,
    describe_os_error,
    kind_of,
    label,
)
from attnkit.output_paths.runlock import refuse_if_locked


def current_umask() -> int:
    """The process umask (reading it means setting it; set straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_dir(path: PathLike) -> None:
    """Make a directory's entries (a rename, a new file) durable."""
    if os.name != "posix":  # directories cannot be opened for fsync on Windows
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: PathLike) -> None:
    """fsync every file and directory below ``root`` (before renaming it into place)."""
    for directory, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(directory)


def _write_error(where: str, e: OSError, target: Path) -> OutputError:
    kept = "it keeps what it held" if target.exists() else "nothing was written"
    return OutputError(f"{where}: cannot write ({describe_os_error(e)}); {kept}")


def _about(e: OSError, *places: Path) -> bool:
    """Whether ``e`` came from writing at or below ``places`` (or from a bare write/close)."""
    if e.filename is None:
        return True
    failed = Path(os.fsdecode(e.filename))
    return any(failed == p or p in failed.parents for p in places)


@contextmanager
def atomic_file(
    path: PathLike, *, option: str = "", inputs: Iterable[PathLike] = ()
) -> Iterator[Path]:
    """Yield an empty temporary file beside ``path``; when the block succeeds it replaces ``path``.

    The temporary keeps ``path``'s suffix (matplotlib picks the image format
    from it). The policy is checked again just before the rename, so a path
    that became a device or a directory meanwhile is still refused.
    """
    target = check_output_file(path, option=option, inputs=inputs)
    where = label(option, path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.stem}.tmp-{uuid.uuid4().hex[:8]}{target.suffix}"
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as e:
        raise _write_error(where, e, target) from None
    try:
        yield tmp
        check_output_file(path, option=option, inputs=inputs)
        if target.exists():  # keep the permission bits of the file being replaced
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except Exception as e:
        os_error = as_os_error(e)
        if os_error is None or not _about(os_error, tmp, target):
            raise
        raise _write_error(where, os_error, target) from None
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(
    path: PathLike, text: str, *, option: str = "", inputs: Iterable[PathLike] = ()
) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically under the policy; returns the real path."""
    with atomic_file(path, option=option, inputs=inputs) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(os.path.realpath(path))


def swap_directory(tmp: Path, target: Path) -> None:
    """Rename the finished directory ``tmp`` to ``target``, replacing a directory there.

    Crash windows (power loss; a Python error is rolled back):
    - before the first rename: ``target`` untouched, a stale ``.NAME.tmp-*`` remains;
    - old renamed away, new not yet in: ``target`` is missing, the previous
      contents are complete at ``.NAME.old-*`` and the new ones at ``.NAME.tmp-*``
      (``attnkit.checkpoints.rundir.remove_stale_temporaries`` renames the old
      copy of a checkpoint back);
    - after the second rename: ``target`` is new, a stale ``.NAME.old-*`` may remain.
    ``target`` never names a half-written directory. Whatever the caller checked,
    a ``target`` that is not a directory (a file, a device, a symbolic link) is
    refused here, before anything is renamed.
    """
    parent = target.parent
    try:
        mode: int | None = target.lstat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISDIR(mode):  # the last guard: never a file or device
        raise UsageError(f"{target}: is {kind_of(mode)}, not a directory; attnkit replaces only "
                         "directories here")  # fmt: skip
    if mode is None:
        os.rename(tmp, target)
        fsync_dir(parent)
        return
    old = parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    fsync_dir(parent)
    shutil.rmtree(old, ignore_errors=True)


def make_temporary_dir(target: Path) -> Path:
    """A hidden ``.NAME.tmp-*`` directory beside ``target`` with the usual permissions.

    (``mkdtemp`` makes it 0700; the finished directory should read like any other.)
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    os.chmod(tmp, 0o777 & ~current_umask())
    return tmp


def check_replaceable_dir(
    out: PathLike,
    *,
    overwrite: bool = False,
    option: str = "--out",
    inputs: Iterable[PathLike] = (),
    checkpoints: Iterable[PathLike] = (),
) -> Path:
    """``check_output_dir``, and a non-empty ``out`` only with ``overwrite``, never a locked
    run directory. Returns the real path; changes nothing."""
    target = check_output_dir(out, option=option, inputs=inputs, checkpoints=checkpoints)
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise UsageError(
            f"{label(option, out)}: already exists and is not empty; pass --overwrite to replace it"
        )
    refuse_if_locked(target, option)
    return target


@contextmanager
def staged_directory(
    out: PathLike,
    *,
    overwrite: bool = False,
    option: str = "--out",
    inputs: Iterable[PathLike] = (),
) -> Iterator[Path]:
    """Yield an empty temporary directory that becomes ``out`` when the block succeeds.

    ``out`` may be new, an empty directory, or (``overwrite=True``) a directory
    to replace; a directory that a running ``attnkit train`` holds locked is
    refused. On any error the temporary directory is removed and ``out`` keeps
    what it held.
    """
    target = check_replaceable_dir(out, overwrite=overwrite, option=option, inputs=inputs)
    try:
        tmp = make_temporary_dir(target)
    except OSError as e:
        raise _write_error(label(option, out), e, target) from None
    try:
        yield tmp
        fsync_tree(tmp)
        swap_directory(tmp, target)
    except Exception as e:  # a full disk, also from safetensors inside the block
        os_error = as_os_error(e)
        if os_error is None or not _about(os_error, tmp, target):
            raise
        raise _write_error(label(option, out), os_error, target) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
