"""Write an export or import directory all at once: into a temporary directory, then rename.

``staged_directory(out)`` yields a hidden ``.NAME.tmp-*`` directory beside
``out`` (same filesystem). When the block ends without error it is fsynced
and renamed to ``out``; an ``out`` already there (``overwrite=True``) is
renamed away first and deleted after. On any error the temporary directory is
removed and ``out`` keeps what it held, so ``out`` never names a half-written
export. (Crash windows as in ``attnkit.checkpoints.files``: a power loss
between the two renames leaves the previous ``out`` at ``.NAME.old-*``.)
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from attnkit.checkpoints import safe_files
from attnkit.errors import UsageError


def check_target(out: Path, *, overwrite: bool) -> None:
    """``UsageError`` unless ``out`` may be (re)written."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UsageError(f"{out}: already exists and is not empty; pass --overwrite to replace it")


def _fsync_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(directory, name), "rb") as f:
                os.fsync(f.fileno())
        safe_files.fsync_dir(Path(directory))


@contextmanager
def staged_directory(out: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty temporary directory that becomes ``out`` when the block succeeds."""
    target = Path(out)
    check_target(target, overwrite=overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        _fsync_tree(tmp)
        if target.exists():
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(target, old)
            try:
                os.rename(tmp, target)
            except BaseException:
                os.rename(old, target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, target)
        safe_files.fsync_dir(target.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
