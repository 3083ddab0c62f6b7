"""Which paths a command may write: the checks of the output-path policy (``attnkit.output_paths``).

Every check here only looks (``lstat``, ``stat``, ``access``); nothing on disk
changes, so a command runs them all before any slow work and fails at once.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from attnkit.errors import UsageError
from attnkit.output_paths.runlock import LOCK_FILE

PathLike = str | os.PathLike[str]


def as_os_error(e: BaseException, path: PathLike | None = None) -> OSError | None:
    """``e`` as an ``OSError``: itself, or the errno inside a safetensors error's text.

    safetensors' writer is Rust: a full disk comes back as ``SafetensorError('Error
    while serializing: I/O error: No space left on device (os error 28) ...')``, not
    as ``OSError``; the errno in it lets a caller report it like any other.
    """
    if isinstance(e, OSError):
        return e
    if type(e).__name__ != "SafetensorError":
        return None
    match = re.search(r"\(os error (\d+)\)", str(e))
    if match is None:
        return OSError(errno.EIO, f"safetensors could not write ({e})", path)
    code = int(match.group(1))
    return OSError(code, os.strerror(code), path)


def describe_os_error(e: OSError) -> str:
    """``strerror`` in lower case (``no space left on device``), or the error's text."""
    reason = e.strerror or str(e) or type(e).__name__
    return reason[:1].lower() + reason[1:]


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISLNK, "a symbolic link"),
)


def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def label(option: str, path: PathLike) -> str:
    return f"{option} {os.fspath(path)}" if option else os.fspath(path)


def _resolve(path: Path, option: str) -> tuple[Path, os.stat_result | None]:
    """The real path (symlinks followed) and its ``stat``, or ``None`` when it does not exist."""
    where = label(option, path)
    try:
        link = path.lstat()
    except (FileNotFoundError, NotADirectoryError):  # _check_parent names the culprit
        link = None
    except OSError as e:  # ENOTDIR (a parent is a file), ENAMETOOLONG, EACCES, ...
        raise UsageError(f"{where}: {describe_os_error(e)}") from None
    real = Path(os.path.realpath(path))
    if link is None or not stat.S_ISLNK(link.st_mode):
        return real, link
    try:
        return real, path.stat()
    except FileNotFoundError:
        raise UsageError(
            f"{where}: a symbolic link to {real}, which does not exist; "
            "give the real path (attnkit follows links only to existing files)"
        ) from None
    except OSError as e:  # ELOOP
        raise UsageError(f"{where}: a symbolic link that cannot be followed "
                         f"({describe_os_error(e)})") from None  # fmt: skip


def _check_parent(target: Path, option: str) -> None:
    """The nearest existing ancestor of ``target`` is a directory we may write into."""
    where = label(option, target)
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"{where}: {ancestor} is a file, not a directory; choose another path")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        reason = "read-only filesystem" if _read_only(ancestor) else "permission denied"
        raise UsageError(f"{where}: cannot write in {ancestor} ({reason}); choose another path")


def _read_only(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _inside(path: Path, directory: Path) -> bool:
    """Whether ``path`` lies at or below ``directory`` (resolved paths)."""
    real, root = Path(os.path.realpath(path)), Path(os.path.realpath(directory))
    return real == root or root in real.parents


def _check_inputs(
    target: Path,
    inputs: Iterable[PathLike],
    option: str,
    *,
    directory: bool,
    checkpoints: Iterable[PathLike] = (),
) -> None:
    where = label(option, target)
    for checkpoint in map(Path, checkpoints):  # nothing written in it (export --out CKPT/hf)
        if not checkpoint.is_dir() or not _inside(target, checkpoint):
            continue
        if _same(target, checkpoint):
            raise UsageError(f"{where}: is also an input of this command; write somewhere else")
        raise UsageError(f"{where}: lies inside the input {checkpoint}; write somewhere else")
    for given in inputs:
        source = Path(given)
        if not source.exists():
            continue
        if _same(target, source):
            raise UsageError(f"{where}: is also an input of this command; write somewhere else")
        if source.is_dir() and not directory and _inside(target, source):
            raise UsageError(f"{where}: lies inside the input {source}; write somewhere else")
        if directory and _inside(source, target):
            raise UsageError(
                f"{where}: holds the input {source}, which replacing it would delete; "
                "write somewhere else"
            )


def check_output_file(
    path: PathLike,
    *,
    option: str = "",
    inputs: Iterable[PathLike] = (),
    checkpoints: Iterable[PathLike] = (),
) -> Path:
    """Check that ``path`` may be written as a file; returns the path to write (links followed).

    ``option`` (``--hyp-out``) names the path in errors; ``inputs`` are the
    files and directories the command reads, ``checkpoints`` the model
    directories among them (see ``check_output_dir``). Changes nothing on disk.
    """
    return _check(path, option, inputs, checkpoints, directory=False)


def check_output_dir(
    path: PathLike,
    *,
    option: str = "",
    inputs: Iterable[PathLike] = (),
    checkpoints: Iterable[PathLike] = (),
) -> Path:
    """Check that ``path`` may be created or replaced as a directory; returns the real path.

    Whether an existing, non-empty directory may be replaced (``--overwrite``)
    is the command's decision; this checks the kind, the inputs and the parent.
    ``checkpoints`` are input model directories (a checkpoint, a Hugging Face
    model): an output may not be one, hold one, or lie inside one. An output
    directory may lie inside other input directories (a run under the data).
    """
    return _check(path, option, inputs, checkpoints, directory=True)


def _check(
    path: PathLike,
    option: str,
    inputs: Iterable[PathLike],
    checkpoints: Iterable[PathLike],
    *,
    directory: bool,
) -> Path:
    if not os.fspath(path):
        raise UsageError(f"{option or 'output'}: empty path")
    given = Path(path)
    target, st = _resolve(given, option)
    wanted = stat.S_ISDIR if directory else stat.S_ISREG
    if st is not None and not wanted(st.st_mode):
        link = "" if target == given.absolute() else f" (through the link {given})"
        kind = "a directory" if directory else "a regular file"
        raise UsageError(
            f"{label(option, target)}: is {kind_of(st.st_mode)}{link}, not {kind}; attnkit "
            f"replaces only {'directories' if directory else 'regular files'} here"
        )
    _check_inputs(target, inputs, option, directory=directory, checkpoints=checkpoints)
    _check_parent(target, option)
    return target


def check_not_in_run_checkpoints(target: PathLike, option: str = "--out") -> None:
    """Refuse an output directory inside a run's ``checkpoints/`` (``RUN/checkpoints/X``,
    at any depth), whose run is any directory holding ``checkpoints/`` beside its
    ``run.json`` or lock file.

    A checkpoint written there by ``merge``, ``average`` or ``import`` would be
    listed as that run's own (``step_N``: its latest, resumed from and pruned by
    ``keep_last``) or sit among files the run deletes; runs own their
    ``checkpoints/``. ``target`` is the resolved output path (``check_output_dir``).
    """
    path = Path(target)
    for folder in [path, *path.parents]:
        run = folder.parent
        if folder.name == "checkpoints" and (
            (run / "run.json").exists() or (run / LOCK_FILE).exists()
        ):
            raise UsageError(
                f"{label(option, target)}: inside the run {run}'s checkpoints/, which that "
                "run owns (it lists, resumes from and prunes what is there); choose a "
                "directory outside it"
            )
