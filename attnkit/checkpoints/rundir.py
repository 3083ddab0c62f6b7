"""Where checkpoints live in a run directory, and tidying after a killed run.

Layout: ``run_dir/checkpoints/step_00001000/`` (``checkpoint_dir``), one
complete checkpoint each (``attnkit.checkpoints.files``). ``latest_checkpoint``
only sees ``step_N`` names, never the hidden directories a crash may leave
(``.step_N.tmp-*`` being written, ``.step_N.old-*`` being replaced,
``.step_N.del-*`` being deleted); ``remove_stale_temporaries`` tidies those.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from attnkit.checkpoints.files import CONFIG_FILE, MODEL_FILE, remove_checkpoint
from attnkit.errors import CheckpointError
from attnkit.output_paths import fsync_dir

_STEP_DIR = re.compile(r"step_(\d+)")
# Hidden directories a crash may leave beside the checkpoints
# (see attnkit.output_paths.swap_directory).
_STALE_DIR = re.compile(r"\.(step_\d+)\.(tmp|old|del)-.*")


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    """``run_dir/checkpoints/step_00001000`` for step 1000 (zero-padded to 8 digits)."""
    if step < 0:  # "step_-0000002" would never be listed again
        raise CheckpointError(f"{run_dir}: a checkpoint's step must be >= 0, got {step}")
    return Path(run_dir) / "checkpoints" / f"step_{step:08d}"


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """The ``step_N`` checkpoints under ``run_dir/checkpoints``, oldest step first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = _STEP_DIR.fullmatch(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))  # numeric: 100000000 after 99999999
    return [path for _, path in sorted(found)]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The highest-step checkpoint under ``run_dir/checkpoints``, or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def prune_checkpoints(run_dir: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` checkpoints (0: keep all); returns the deleted."""
    if keep_last <= 0:
        return []
    old = list_checkpoints(run_dir)[:-keep_last]
    for path in old:
        remove_checkpoint(path)
    return old


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory, or a run directory (its latest checkpoint)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory not found")
    if (path / CONFIG_FILE).exists() or (path / MODEL_FILE).exists():
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise CheckpointError(f"{path}: holds no checkpoint (no config.json, no checkpoints/)")
    return latest


def remove_stale_temporaries(run_dir: str | Path) -> list[Path]:
    """Tidy the hidden directories a killed run may leave in ``run_dir/checkpoints``.

    ``.step_N.tmp-*`` (a checkpoint being written) and ``.step_N.del-*`` (one
    being deleted) are removed. ``.step_N.old-*`` is the previous copy of a
    checkpoint being replaced: it is renamed back to ``step_N`` if that name is
    missing (the crash hit between the two renames), else removed. Call it
    only when no other process writes to the run. Returns what was removed.
    """
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    removed = []
    for path in sorted(root.iterdir()):
        match = _STALE_DIR.fullmatch(path.name)
        if not match or not path.is_dir():
            continue
        target = root / match.group(1)
        if match.group(2) == "old" and not target.exists():
            os.rename(path, target)
            fsync_dir(root)
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
