"""What a skipped update (a non-finite loss or gradient) does to a run.

A skipped update warns once per streak; more than ``train.max_nonfinite`` in a row
stop the run with a ``TrainingError`` (diverged, nothing saved); a run whose every
update was skipped learned nothing and ends with an error, not a success.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import NoReturn

from attnkit.checkpoints import rundir
from attnkit.errors import TrainingError


def check_skipped(what: str, *, step: int, streak: int, limit: int, out_dir: Path) -> None:
    """Warn about a skipped update (``what`` says why), or stop once ``streak`` skipped
    updates in a row are more than ``limit``."""
    if streak > limit:
        latest = rundir.latest_checkpoint(out_dir) or "none (no checkpoint yet)"
        raise TrainingError(
            f"step {step}: {what}, {streak} updates in a row "
            f"(more than train.max_nonfinite={limit}); training diverged and was stopped "
            f"without saving; the last good checkpoint is {latest}; "
            "try a lower train.lr, train.precision=fp32 or train.clip_norm=1.0"
        )
    if streak > 1:  # once per streak: each skip is in metrics.jsonl
        return
    warnings.warn(
        f"step {step}: {what}; update skipped (more than "
        f"train.max_nonfinite={limit} in a row stop the run; each is logged)",
        RuntimeWarning,
        stacklevel=3,
    )


def raise_nothing_learned(steps: int, reason: str, latest: Path | None) -> NoReturn:
    """A run whose every update was skipped learned nothing: an error, not a success.

    No checkpoint was written for it (the weights are still the ones it started
    from), so ``--resume`` and ``average`` never take a no-op for progress.
    """
    where = latest if latest is not None else "none"
    raise TrainingError(
        f"all {steps} updates of this run were skipped ({reason}); nothing was learned "
        f"and no checkpoint was written (the last good one: {where}); look for weights "
        "or a scale that overflow: train.lora.alpha, train.lr, the --init weights"
    )
