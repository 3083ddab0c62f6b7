"""The trainer: one loop for every task (``attnkit.training.tasks``).

``Trainer(run, task, out_dir)`` owns one run directory::

    OUT/
      metrics.jsonl           one JSON record per log/eval event (attnkit.training.logging)
      loss.png                the loss curve, redrawn at every evaluation
      tensorboard/            with train.log_to: [jsonl, tensorboard]
      checkpoints/step_00001000/
        model.safetensors  config.json  tokenizer.json  trainer_state.json
        optimizer.safetensors  (...)

Every checkpoint is complete on its own (``--checkpoint`` takes the run or one of them).

What every task gets: Adam/AdamW and the schedule (``train.schedule``), gradient
accumulation (``train.grad_accum`` batches per update, the update normalised by the
token count of all of them; the task's per-batch metrics, such as mixture-of-experts
utilisation, averaged the same way into the train record), clipping, precision
(``train.precision``: bf16/fp16 autocast, a ``GradScaler`` for fp16), the fast paths
(``train.fast``/``train.compile``: ``attnkit/training/fast.py``), data parallelism under
``torchrun`` (``attnkit.training.distributed``: each rank trains on its share of every
global batch; only rank 0 writes), checkpoints every ``train.save_every`` steps (or every
``train.save_fraction`` of a time budget) with the newest ``keep_last`` kept, and a
bit-exact ``resume``.

Numerical guards: an update whose loss or gradient norm is NaN/inf is skipped (no
optimizer or schedule step, gradients zeroed), logged and counted; more than
``train.max_nonfinite`` such updates in a row stop training with a ``TrainingError``, and
weights holding NaN/inf are never saved. fp16 overflow skips are the loss scaler's
business and do not count. A run whose every update was skipped (``train.lora.alpha:
1e308``, weights near the float32 maximum) is an error too, and saves no checkpoint.

``callbacks`` (``(event, step) -> None``) are called at two moments, for tests that crash
a run there: ``"train_step"`` after the backward pass and before the update, and
``"checkpoint_write"`` half-way through writing a checkpoint.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from attnkit.checkpoints import rundir
from attnkit.device import resolve_device
from attnkit.errors import ConfigError
from attnkit.kernels import matmul_choice
from attnkit.training import distributed as dist_util
from attnkit.training.checkpointing import Checkpointer, Counters
from attnkit.training.distributed import DistContext
from attnkit.training.fast import fast_enabled, naming_compile_failures
from attnkit.training.logging import RunLog
from attnkit.training.optim import build_optimizer
from attnkit.training.runconfig import RunConfig
from attnkit.training.schedules import build_scheduler, remaining_steps, set_total_steps
from attnkit.training.skipped_updates import check_skipped, raise_nothing_learned
from attnkit.training.tasks.base import Task, TaskContext, autocast_dtype
from attnkit.training.weights import weights_for_run

Callback = Callable[[str, int], None]


class Trainer:
    """Trains ``task``'s model under ``run.train`` into ``out_dir`` (see the module doc)."""

    def __init__(
        self,
        run: RunConfig,
        task: Task,
        out_dir: str | Path,
        *,
        device: str | torch.device | None = None,
        progress: bool = True,
        distributed: DistContext | None = None,
        callbacks: Sequence[Callback] = (),
    ) -> None:
        self.run, self.cfg, self.task = run, run.train, task
        self.out_dir = Path(out_dir)
        self.device = distributed.device if distributed is not None else resolve_device(device)
        self.dist = distributed if distributed is not None else DistContext(device=self.device)
        self.progress, self.callbacks = progress, list(callbacks)
        cfg = self.cfg
        if cfg.threads is not None:  # process-wide, like the seed below
            torch.set_num_threads(cfg.threads)
        if self.dist.enabled and cfg.distributed == "fsdp" and cfg.precision == "fp16":
            raise ConfigError(
                "train.precision: fp16 is not supported with train.distributed=fsdp; use bf16"
            )
        self.amp_dtype = autocast_dtype(cfg.precision, self.device)
        # train.fast (attnkit/training/fast.py): fused Adam everywhere it is on;
        # the compiled forward (and a task's faster loss) in single-process runs only.
        self.fast = fast_enabled(str(cfg.fast), self.device)
        task.setup(TaskContext(self.device, self.dist, self.fast, self.amp_dtype))
        torch.manual_seed(cfg.seed)  # the initial weights follow train.seed
        self.model = task.build_model().to(self.device)
        # Every weight trains, or LoRA adapters on the frozen --init weights (train.lora).
        self.weights = weights_for_run(run, task.start)
        self.weights.prepare(self.model)
        self.compiled = cfg.compile or (self.fast and not self.dist.enabled)
        # oneDNN's or MKL's fp32 GEMMs on the CPU (inductor lowers its own when compiling;
        # under bf16/fp16 autocast the products are not fp32).
        cpu = self.device.type == "cpu" and not self.compiled and self.amp_dtype is None
        self._time_matmul, self.matmul_note = matmul_choice.prepare(
            self.model, cfg.cpu_matmul, cpu=cpu, distributed=self.dist.enabled
        )
        # DDP: a wrapper around self.model; FSDP2: self.model itself, sharded in place
        # (so the optimizer below sees the sharded parameters).
        self._train_model = dist_util.wrap_model(self.model, self.dist, cfg.distributed)
        if self.dist.rank > 0:  # same initial weights (seeded above), own dropout masks
            torch.manual_seed(cfg.seed + self.dist.rank)
        fast_fused = None if self.fast else False
        self.optimizer = build_optimizer(
            self.model,
            lr=cfg.lr,
            betas=cfg.betas or task.betas,
            eps=cfg.eps or task.eps,
            weight_decay=cfg.weight_decay,
            position_lr_scale=cfg.position_lr_scale,
            # train.fused_optimizer: torch's fused Adam/AdamW kernel (CUDA and CPU);
            # unset, it follows train.fast (fused where the fast paths are on, CUDA).
            fused=cfg.fused_optimizer if cfg.fused_optimizer is not None else fast_fused,
        )
        self.scheduler = build_scheduler(
            self.optimizer,
            cfg.schedule,
            d_model=task.model_config.d_model,
            warmup_steps=cfg.warmup_steps,
            factor=cfg.lr,
            total_steps=cfg.max_steps,
            min_lr=cfg.min_lr,
        )
        # fp16 needs loss scaling (bf16 does not); GradScaler works on CUDA and the CPU.
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.amp_dtype == torch.float16
        )
        self.step = 0
        self.nonfinite_streak = 0  # updates skipped in a row for a NaN/inf loss or norm
        self.skipped_steps = 0  # all skipped updates (fp16 overflows included)
        self.log: RunLog | None = None

    def _emit(self, event: str, step: int) -> None:
        for callback in self.callbacks:
            callback(event, step)

    # -- one optimisation step -----------------------------------------------------

    def train_step(self) -> dict[str, Any]:
        """One update from ``grad_accum`` batches (this rank's shares of global batches).

        The update is skipped (weights, optimizer and schedule untouched,
        gradients zeroed) when the loss or the gradient norm is not finite;
        ``stats["skipped"]`` then names why. Raises ``TrainingError`` after
        more than ``train.max_nonfinite`` such skips in a row.
        """
        model = self._train_model
        model.train()
        loss_sum = nll_sum = 0.0
        n_tokens = 0
        metric_sums: dict[str, float] = {}  # the task's per-batch means, times tokens
        ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
        for i in range(self.cfg.grad_accum):
            batch, real = self.task.next_batch()
            if self._time_matmul:  # train.cpu_matmul auto, first batch of a new model here

                def one_pass(b: object = batch) -> None:
                    self.task.loss(model, b).loss.backward()  # type: ignore[no-untyped-call]  # torch leaves backward unannotated

                self.matmul_note = matmul_choice.choose(self.model, one_pass)
                self._time_matmul = False
            # DDP all-reduces the gradients once, in the last micro-batch's backward.
            last = i == self.cfg.grad_accum - 1
            with nullcontext() if last or not ddp else model.no_sync():  # type: ignore[operator]
                with naming_compile_failures(self.compiled):
                    sums = self.task.loss(model, batch)
                loss, nll, n = sums.loss, sums.nll, sums.tokens
                if not real:  # a stand-in batch: join the all-reduce, add nothing
                    loss, nll, n = loss * 0.0, nll * 0.0, 0
                self.scaler.scale(loss).backward()  # type: ignore[no-untyped-call]  # as above
            loss_sum += float(loss.detach())
            nll_sum += float(nll.detach())
            n_tokens += n
            for key, value in sums.metrics.items():
                metric_sums[key] = metric_sums.get(key, 0.0) + value * n
        self._emit("train_step", self.step + 1)
        keys = sorted(metric_sums)  # the same keys on every rank (the same model)
        loss_sum, nll_sum, total, *metric_totals = self.dist.sum(
            [loss_sum, nll_sum, n_tokens, *(metric_sums[k] for k in keys)]
        )
        n_tokens = int(total)
        metrics = {k: v / max(n_tokens, 1) for k, v in zip(keys, metric_totals)}
        # Losses are sums and DDP/FSDP average gradients over the ranks, so scaling
        # by world_size / (global token count) makes the update a per-token mean
        # over the global batch, however it was split across ranks and micro-batches.
        factor = self.dist.world_size / max(n_tokens, 1)
        self.scaler.unscale_(self.optimizer)
        norm = dist_util.scaled_grad_norm(self.model.parameters(), factor, self.cfg.clip_norm)
        skipped = ""
        if math.isfinite(loss_sum) and math.isfinite(norm):
            self.scaler.step(self.optimizer)  # optimizer.step() unless fp16 overflowed
            self.scaler.update()
            self.scheduler.step()
            self.nonfinite_streak = 0
        else:
            self.scaler.update()  # fp16: lowers the loss scale; otherwise a no-op
            self.skipped_steps += 1
            if math.isfinite(loss_sum) and self.scaler.is_enabled():
                skipped = "fp16 gradient overflow (loss scale lowered)"
            else:
                what = "loss" if not math.isfinite(loss_sum) else "gradient norm"
                skipped = f"non-finite {what}"
                self.nonfinite_streak += 1
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        if self.nonfinite_streak and skipped.startswith("non-finite"):
            check_skipped(skipped, step=self.step, streak=self.nonfinite_streak,
                          limit=self.cfg.max_nonfinite, out_dir=self.out_dir)  # fmt: skip
        return {
            "loss": loss_sum / max(n_tokens, 1),
            "nll": nll_sum / max(n_tokens, 1),
            "tokens": n_tokens,
            "lr": self.optimizer.param_groups[0]["lr"],
            "grad_norm": norm,
            "skipped": skipped,
            "metrics": metrics,
        }

    def evaluate(self) -> dict[str, float]:
        """The task's validation metrics, in eval mode (the same on every rank)."""
        metrics = self.task.evaluate(self.model)
        self.model.train()
        return metrics

    # -- checkpoints ---------------------------------------------------------------

    def checkpointer(self) -> Checkpointer:
        """A ``Checkpointer`` of the trainer's parts as they are now (``checkpointing.py``)."""
        return Checkpointer(
            self.out_dir,
            run=self.run,
            task=self.task,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            scaler=self.scaler,
            dist=self.dist,
            during_write=lambda step: self._emit("checkpoint_write", step),
            weights=self.weights,
        )

    def counters(self) -> Counters:
        """The step and the non-finite guard's counters, as a checkpoint records them."""
        return Counters(self.step, self.nonfinite_streak, self.skipped_steps)

    def trainer_state(self) -> dict[str, object]:
        """Everything besides weights and optimizer that an exact resume needs;
        under torchrun a collective."""
        return self.checkpointer().trainer_state(self.counters())

    def save(self) -> Path:
        """Write ``checkpoints/step_N`` and prune to ``train.keep_last``; never NaN weights."""
        return self.checkpointer().save(self.counters())

    def resume(self) -> bool:
        """Continue from the run directory's latest checkpoint, if there is one.

        ``metrics.jsonl`` is cut back to the checkpoint's step (a torn last line
        is dropped).
        """
        counters = self.checkpointer().resume()
        if counters is None:
            return False
        self.step = counters.step
        self.nonfinite_streak = counters.nonfinite_streak
        self.skipped_steps = counters.skipped_steps
        self.log = RunLog(
            self.out_dir, self.cfg.log_to, enabled=self.dist.is_main, resume_step=self.step
        )
        return True

    # -- the loop ------------------------------------------------------------------

    def fit(self, stop_when: Callable[[dict[str, float]], bool] | None = None) -> dict[str, object]:
        """Train until ``max_steps``, ``max_minutes`` or ``stop_when(valid metrics)``.

        Returns the final step, whether training stopped early, and the last
        validation metrics.
        """
        from attnkit.progress import progress

        cfg, main = self.cfg, self.dist.is_main
        if main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        if self.log is None:
            self.log = RunLog(self.out_dir, cfg.log_to, enabled=main)
        log = self.log
        if self.compiled:  # only the training forward; self.model keeps its state-dict names
            self._train_model = torch.compile(self._train_model)  # type: ignore[assignment]
        start = time.perf_counter()
        bar = progress(cfg.max_steps, initial=self.step, disable=not (self.progress and main),
                       unit="step")  # fmt: skip
        window_tokens, window_start = 0, time.perf_counter()
        last_valid: dict[str, float] = {}
        stopped_early = False
        first_step = self.step
        skipped_at_start = self.skipped_steps
        last_skip = ""
        reached_goal = False
        # Steps the time budget still holds at the speed so far (None: no budget, or
        # too early to tell), measured once per step after the update.
        steps_left: int | None = None
        saved_shares = 0  # train.save_fraction: budget shares already saved at
        while self.step < cfg.max_steps:
            if cfg.decay_to_budget and steps_left is not None:  # ranks agree on the mean
                # A fixed warm-up is re-aimed only after it (the end would fall inside it);
                # a warm-up that is a share of the budget is re-aimed from the start.
                if cfg.warmup_fraction is not None or self.step >= cfg.warmup_steps:
                    total = self.dist.sum([min(cfg.max_steps, self.step + steps_left)])[0]
                    aim = int(total / self.dist.world_size)
                    set_total_steps(self.scheduler, aim, step=self.step,
                                    warmup_fraction=cfg.warmup_fraction)  # fmt: skip
            stats = self.train_step()
            if self.step == first_step + 1 and self.matmul_note and main:
                bar.write(self.matmul_note)
            window_tokens += stats["tokens"]
            if cfg.max_minutes is not None:
                steps_left = remaining_steps(self.step - first_step, time.perf_counter() - start,
                                             60.0 * cfg.max_minutes)  # fmt: skip
            if steps_left is not None and self.step % 10 == 0:
                # A time budget ends the run before max_steps: the bar's total (and so its
                # ETA) is the step the budget will end at, at the speed so far.
                bar.total = min(cfg.max_steps, self.step + steps_left)
            bar.update(1)
            if stats["skipped"]:
                last_skip = stats["skipped"]
                log.log({"split": "skipped", "step": self.step, "reason": stats["skipped"]})
            # Updates applied in this session: with none, the weights are the start's.
            applied = self.step - first_step - (self.skipped_steps - skipped_at_start)
            out_of_time = cfg.max_minutes is not None and self.dist.from_main(
                time.perf_counter() - start >= 60.0 * cfg.max_minutes
            )  # rank 0's clock decides, so every rank stops at the same step
            last = self.step == cfg.max_steps or out_of_time
            if self.step % cfg.log_every == 0 or last:
                tok_s = window_tokens / max(time.perf_counter() - window_start, 1e-9)
                window_tokens, window_start = 0, time.perf_counter()
                log.log({"split": "train", "step": self.step, **self.task.progress(),
                         "loss": stats["loss"], "nll": stats["nll"], "lr": stats["lr"],
                         "grad_norm": stats["grad_norm"], "tokens": stats["tokens"],
                         "tokens_per_s": tok_s, **stats["metrics"]})  # fmt: skip
                bar.set_postfix(loss=f"{stats['loss']:.3f}", lr=f"{stats['lr']:.2e}",
                                tok_s=f"{tok_s:,.0f}")  # fmt: skip
            if self.step % cfg.eval_every == 0 or last:
                last_valid = self.evaluate()
                if self.dist.from_main(
                    stop_when is not None and bool(last_valid) and stop_when(last_valid)
                ):
                    out_of_time = last = reached_goal = True  # save and stop
                if last_valid and main:
                    log.log({"split": "valid", "step": self.step, **last_valid})
                    bar.write(
                        f"step {self.step}: "
                        + ", ".join(f"valid {k} {v:.4g}" for k, v in last_valid.items())
                    )
                log.on_eval()
            budget_save = False
            if cfg.save_fraction is not None and steps_left is not None:
                # A checkpoint each time the run passes another save_fraction of the steps
                # its budget will reach, so the last few (what `attnkit average` reads)
                # are the annealed end of the run on a slow machine as on a fast one.
                shares = int(self.step / max(self.step + steps_left, 1) / cfg.save_fraction)
                budget_save = self.dist.from_main(shares > saved_shares)
                saved_shares = max(saved_shares, shares)
            due = (cfg.save_every and self.step % cfg.save_every == 0) or budget_save or last
            if due and applied > 0:  # nothing applied yet: the start's weights, unchanged
                self.save()
            if out_of_time:
                stopped_early = True
                if main and reached_goal:
                    bar.write(f"stopping at step {self.step}: the validation goal is reached")
                elif main and cfg.max_minutes is not None and self.step < cfg.max_steps:
                    bar.write(f"stopping at step {self.step}: train.max_minutes reached")
                break
        bar.close()
        log.close()
        ran = self.step - first_step
        if ran > 0 and ran == self.skipped_steps - skipped_at_start:
            raise_nothing_learned(ran, last_skip, rundir.latest_checkpoint(self.out_dir))
        return {"step": self.step, "stopped_early": stopped_early, "valid": last_valid,
                "skipped_steps": self.skipped_steps}  # fmt: skip
