"""Checkpoints of a training run: what ``Trainer.save`` writes and ``Trainer.resume`` reads.

Functions of the ``Trainer`` (``attnkit.training.loop``), kept apart so the loop
file holds the loop. A checkpoint is complete on its own (weights, config,
tokenizer, optimizer, and the trainer state an exact resume needs: step,
schedule, loss scaler, guards' counters, every RNG).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from attnkit.checkpoints import files as ckpt_files
from attnkit.checkpoints import rundir
from attnkit.checkpoints.loading import load_model_state
from attnkit.errors import TrainingError
from attnkit.training import distributed as dist_util
from attnkit.training import distributed_state as dist_state
from attnkit.training import rng
from attnkit.training.logging import RunLog
from attnkit.training.trainer_state import STATE_FORMAT, upgrade_state

if TYPE_CHECKING:
    from attnkit.training.loop import Trainer


def trainer_state(self: Trainer) -> dict[str, Any]:
    """Everything besides weights and optimizer that an exact resume needs.

    Under torchrun a collective (every rank's RNG state is gathered).
    """
    state: dict[str, Any] = {
        "format": STATE_FORMAT,
        "task": self.task.name,
        "step": self.step,
        "task_state": self.task.state_dict(),
        "scheduler": self.scheduler.state_dict(),
        "scaler": self.scaler.state_dict(),  # fp16 loss scale and growth tracker
        "nonfinite_streak": self.nonfinite_streak,
        "skipped_steps": self.skipped_steps,
        "world_size": self.dist.world_size,
        "rng": rng.capture_rng_state(),
        "run": self.run.to_dict(),
    }
    if self.dist.enabled:  # each rank's own dropout stream (torch RNGs: small tensors)
        own = {k: v for k, v in state["rng"].items() if k in ("torch", "cuda")}
        state["rng_ranks"] = self.dist.gather(own)
    return state


def save(self: Trainer) -> Path:
    """Write ``checkpoints/step_N`` (rank 0; the other ranks wait for it), then prune
    to the newest ``train.keep_last``. Refuses (``TrainingError``) to write weights
    holding NaN or inf, so the last checkpoint on disk is always a good one."""
    directory = rundir.checkpoint_dir(self.out_dir, self.step)
    if not dist_util.all_finite(list(self.model.parameters()), self.dist):
        latest = rundir.latest_checkpoint(self.out_dir)
        raise TrainingError(
            f"step {self.step}: the weights hold NaN or inf; not writing a checkpoint; "
            f"the last good checkpoint is {latest or 'none'}; try a lower train.lr, "
            "train.precision=fp32 or train.clip_norm=1.0"
        )
    # FSDP: collectives gathering full tensors onto rank 0 (the single-process format).
    model_state = dist_state.full_model_state(self.model)
    optimizer_state = dist_state.full_optimizer_state(self.model, self.optimizer)
    trainer_state_ = trainer_state(self)
    if self.dist.is_main:
        step, tokenizer = self.step, self.task.tokenizer  # None: the task reads no text
        ckpt_files.save_checkpoint(
            directory,
            model_state=model_state,
            config=self.task.model_config.to_dict(),
            tokenizer_json=None if tokenizer is None else tokenizer.to_json(),
            trainer_state=trainer_state_,
            optimizer_state=optimizer_state,
            during_write=lambda: self._emit("checkpoint_write", step),
        )
        rundir.prune_checkpoints(self.out_dir, self.cfg.keep_last)
    self.dist.barrier()
    return directory


def resume(self: Trainer) -> bool:
    """Continue from the latest checkpoint in the run directory, if there is one.

    Hidden leftovers of a killed run (a half-written checkpoint) are removed
    first; ``metrics.jsonl`` is cut back to the checkpoint's step (a torn
    last line is dropped). Under torchrun every rank loads the same checkpoint.
    """
    if self.dist.is_main:
        rundir.remove_stale_temporaries(self.out_dir)
    self.dist.barrier()
    latest = rundir.latest_checkpoint(self.out_dir)
    if latest is None:
        return False
    state = ckpt_files.load_checkpoint(latest)
    ts = upgrade_state(state.trainer_state or {}, self.task.name, latest)
    if dist_util.is_fsdp(self.model):
        dist_state.load_full_model_state(self.model, state.model_state)
    else:
        load_model_state(self.model, state.model_state, source=latest / ckpt_files.MODEL_FILE)
    if state.optimizer_state is not None:
        if dist_util.is_fsdp(self.model):
            dist_state.load_full_optimizer_state(self.model, self.optimizer, state.optimizer_state)
        else:
            self.optimizer.load_state_dict(state.optimizer_state)
    self.step = int(ts["step"])
    self.task.load_state_dict(ts["task_state"])
    self.nonfinite_streak = int(ts.get("nonfinite_streak", 0))
    self.skipped_steps = int(ts.get("skipped_steps", 0))
    self.scheduler.load_state_dict(ts["scheduler"])
    if ts.get("scaler") and self.scaler.is_enabled():
        self.scaler.load_state_dict(ts["scaler"])
    rng_ranks = ts.get("rng_ranks") or []
    if self.dist.enabled and len(rng_ranks) == self.dist.world_size:
        rng.restore_rng_state({**ts["rng"], **rng_ranks[self.dist.rank]})
    else:
        rng.restore_rng_state(ts["rng"])
        if self.dist.rank > 0:  # saved with another world size: fresh dropout masks
            torch.manual_seed(self.cfg.seed + self.dist.rank + self.step)
    self.log = RunLog(
        self.out_dir, self.cfg.log_to, enabled=self.dist.is_main, resume_step=self.step
    )
    return True
