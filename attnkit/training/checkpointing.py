"""Checkpoints of a training run: what ``Trainer.save`` writes and ``Trainer.resume`` reads.

A ``Checkpointer`` receives the parts a checkpoint holds (model, optimizer,
schedule, loss scaler, task, the data-parallel context) and the trainer's
counters, and knows nothing of the trainer itself, so the loop file holds the
loop and this file the checkpoint. A checkpoint is complete on its own
(weights, config, tokenizer, optimizer, and the trainer state an exact resume
needs: step, schedule, loss scaler, guards' counters, every RNG).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from attnkit import __version__
from attnkit.checkpoints import files as ckpt_files
from attnkit.checkpoints import rundir
from attnkit.errors import TrainingError
from attnkit.training import distributed as dist_util
from attnkit.training import distributed_state as dist_state
from attnkit.training import rng
from attnkit.training.distributed import DistContext
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import Task
from attnkit.training.trainer_state import STATE_FORMAT, upgrade_state
from attnkit.training.weights import FullWeights, RunWeights


@dataclass(frozen=True)
class Counters:
    """The trainer's own numbers that a resume restores.

    Attributes:
        step: updates done.
        nonfinite_streak: updates skipped in a row for a NaN/inf loss or norm.
        skipped_steps: all skipped updates (fp16 overflows included).
    """

    step: int = 0
    nonfinite_streak: int = 0
    skipped_steps: int = 0


class Checkpointer:
    """Writes ``OUT/checkpoints/step_N`` and resumes from the newest one.

    Args:
        out_dir: the run directory.
        run: the run's config (saved in the trainer state; ``train.keep_last``,
            ``train.seed``).
        task: its ``state_dict`` (where the data stream stands), model config and
            tokenizer go into every checkpoint.
        model: the unwrapped model (FSDP-sharded in place, or plain).
        optimizer, scheduler, scaler: saved and restored with it.
        dist: the data-parallel context; only rank 0 writes, every rank reads.
        during_write: called with the step half-way through writing (for tests
            that crash a run there).
        weights: what of the model a checkpoint stores and how it comes back
            (``attnkit.training.weights``: everything, or a LoRA run's adapters).
    """

    def __init__(
        self,
        out_dir: Path,
        *,
        run: RunConfig,
        task: Task,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: LRScheduler,
        scaler: torch.amp.GradScaler,
        dist: DistContext,
        during_write: Callable[[int], None] | None = None,
        weights: RunWeights | None = None,
    ) -> None:
        self.out_dir, self.run, self.task, self.dist = out_dir, run, task, dist
        self.model, self.optimizer = model, optimizer
        self.scheduler, self.scaler = scheduler, scaler
        self.during_write = during_write
        self.weights = weights if weights is not None else FullWeights()

    def trainer_state(self, counters: Counters) -> dict[str, object]:
        """Everything besides weights and optimizer that an exact resume needs.

        Under torchrun a collective (every rank's RNG state is gathered).
        """
        rng_state = rng.capture_rng_state()
        state: dict[str, object] = {
            "format": STATE_FORMAT,
            "attnkit": __version__,  # the version that wrote this checkpoint
            "task": self.task.name,
            "step": counters.step,
            "task_state": self.task.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),  # fp16 loss scale and growth tracker
            "nonfinite_streak": counters.nonfinite_streak,
            "skipped_steps": counters.skipped_steps,
            "world_size": self.dist.world_size,
            "rng": rng_state,
            "run": self.run.to_dict(),
        }
        if self.dist.enabled:  # each rank's own dropout stream (torch RNGs: small tensors)
            own = {k: v for k, v in rng_state.items() if k in ("torch", "cuda")}
            state["rng_ranks"] = self.dist.gather(own)
        return state

    def save(self, counters: Counters) -> Path:
        """Write ``checkpoints/step_N`` (rank 0; the other ranks wait for it), then prune
        to the newest ``train.keep_last``. Refuses (``TrainingError``) to write weights
        holding NaN or inf, so the last checkpoint on disk is always a good one."""
        step = counters.step
        directory = rundir.checkpoint_dir(self.out_dir, step)
        if not dist_util.all_finite(list(self.model.parameters()), self.dist):
            latest = rundir.latest_checkpoint(self.out_dir)
            raise TrainingError(
                f"step {step}: the weights hold NaN or inf; not writing a checkpoint; "
                f"the last good checkpoint is {latest or 'none'}; try a lower train.lr, "
                "train.precision=fp32 or train.clip_norm=1.0"
            )
        # FSDP: collectives gathering full tensors onto rank 0 (the single-process format).
        model_state = self.weights.state(dist_state.full_model_state(self.model))
        optimizer_state = dist_state.full_optimizer_state(self.model, self.optimizer)
        trainer_state = self.trainer_state(counters)
        if self.dist.is_main:
            tokenizer = self.task.tokenizer  # None: the task reads no text
            during_write = self.during_write
            ckpt_files.save_checkpoint(
                directory,
                model_state=model_state,
                config=self.task.model_config.to_dict(),
                tokenizer_json=None if tokenizer is None else tokenizer.to_json(),
                trainer_state=trainer_state,
                optimizer_state=optimizer_state,
                during_write=None if during_write is None else lambda: during_write(step),
                extra_files=self.weights.files(),
            )
            rundir.prune_checkpoints(self.out_dir, self.run.train.keep_last)
        self.dist.barrier()
        return directory

    def resume(self) -> Counters | None:
        """Load the latest checkpoint in the run directory into the parts; its counters,
        or ``None`` when there is none.

        Hidden leftovers of a killed run (a half-written checkpoint) are removed
        first. Under torchrun every rank loads the same checkpoint.
        """
        if self.dist.is_main:
            rundir.remove_stale_temporaries(self.out_dir)
        self.dist.barrier()
        latest = rundir.latest_checkpoint(self.out_dir)
        if latest is None:
            return None
        state = ckpt_files.load_checkpoint(latest)
        ts = upgrade_state(state.trainer_state or {}, self.task.name, latest)
        fsdp = dist_util.is_fsdp(self.model)
        if fsdp:
            dist_state.load_full_model_state(self.model, state.model_state)
        else:
            self.weights.load(self.model, state.model_state, source=latest / ckpt_files.MODEL_FILE)
        if state.optimizer_state is not None:
            if fsdp:
                dist_state.load_full_optimizer_state(
                    self.model, self.optimizer, state.optimizer_state
                )
            else:
                self.optimizer.load_state_dict(state.optimizer_state)
        counters = Counters(
            step=int(ts["step"]),
            nonfinite_streak=int(ts.get("nonfinite_streak", 0)),
            skipped_steps=int(ts.get("skipped_steps", 0)),
        )
        self.task.load_state_dict(ts["task_state"])
        self.scheduler.load_state_dict(ts["scheduler"])
        if ts.get("scaler") and self.scaler.is_enabled():
            self.scaler.load_state_dict(ts["scaler"])
        rng_ranks = ts.get("rng_ranks") or []
        dist = self.dist
        if dist.enabled and len(rng_ranks) == dist.world_size:
            rng.restore_rng_state({**ts["rng"], **rng_ranks[dist.rank]})
        else:
            rng.restore_rng_state(ts["rng"])
            if dist.rank > 0:  # saved with another world size: fresh dropout masks
                torch.manual_seed(self.run.train.seed + dist.rank + counters.step)
        return counters
