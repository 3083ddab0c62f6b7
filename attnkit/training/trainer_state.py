"""The trainer's resumable state (``trainer_state.json``) across attnkit versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnkit.errors import CheckpointError

STATE_FORMAT = 2  # trainer_state.json layout; 1 was attnkit 0.1.0's two trainers


def upgrade_state(ts: dict[str, Any], task: str, source: Path) -> dict[str, Any]:
    """A ``trainer_state`` of this version from one of any version that can resume.

    Format 1 (attnkit 0.1.0) kept the translation stream's position at the top
    level and the language-model stream's generators as ``batch_rng``/``mask_rng``.
    """
    step = ts.get("step") if isinstance(ts, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(
            f"{source}: trainer_state.json: step must be an integer >= 0, got {step!r} "
            "(corrupt or edited file)"
        )
    if ts.get("format") == STATE_FORMAT:
        if ts.get("task") != task:
            raise CheckpointError(
                f"{source}: a {ts.get('task')} run's checkpoint cannot resume task {task}"
            )
        return ts
    if "epoch" in ts and "batch_in_epoch" in ts and task == "translation":
        return {**ts, "task_state": {"epoch": ts["epoch"], "batch_in_epoch": ts["batch_in_epoch"]}}
    if "batch_rng" in ts and task in ("lm", "mlm"):
        task_state = {"batch_rng": ts["batch_rng"]}
        if task == "mlm":
            task_state["mask_rng"] = ts["mask_rng"]
        return {**ts, "task_state": task_state, "scaler": None}
    raise CheckpointError(
        f"{source}: its trainer_state.json was written by an attnkit that cannot resume a "
        f"{task} run here (format {ts.get('format', 1)}); use it for inference, or start a "
        "new run with --overwrite"
    )
