"""Training a translation model: data -> tokenizer -> batches -> the paper's recipe.

``TranslationTrainer`` owns one run directory::

    OUT/
      metrics.jsonl           one JSON record per log/eval event
      loss.png                the loss curve, redrawn at every evaluation
      checkpoints/step_00001000/
        model.safetensors  config.json  tokenizer.json  trainer_state.json
        optimizer.safetensors  (...)

Every checkpoint is complete on its own (``attnkit translate --checkpoint``
takes either the run directory or one checkpoint directory).

Numerical guards: an update whose loss or gradient norm is NaN/inf is skipped
(no optimizer or schedule step, gradients zeroed) with a warning; more than
``train.max_nonfinite`` such updates in a row stop training with a
``TrainingError`` and no checkpoint of the bad state. fp16 uses a
``GradScaler`` (its overflow skips are the scaler's business and do not count).

Under ``torchrun`` the trainer runs data-parallel (``attnkit.training.distributed``):
each rank trains on its share of every global batch; only rank 0 writes.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnkit.data.batching import TokenBudgetSampler, filter_by_length
from attnkit.data.collate import TranslationBatch, collate_translation
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError, TrainingError, UsageError
from attnkit.models import (
    EncoderDecoder,
    Seq2SeqConfig,
    build_model,
    config_from_preset,
)
from attnkit.training import checkpoint as ckpt
from attnkit.training import distributed as dist_util
from attnkit.training.distributed import DistContext
from attnkit.training.fast import fast_enabled, naming_compile_failures
from attnkit.training.loading import resolve_device
from attnkit.training.losses import (
    chunked_label_smoothed_cross_entropy,
    label_smoothed_cross_entropy,
)
from attnkit.training.optim import build_optimizer
from attnkit.training.runconfig import RunConfig, TokenizerConfig
from attnkit.training.schedules import build_scheduler

Pair = tuple[str, str]


def model_config_from_run(run: RunConfig, tokenizer: Tokenizer) -> Seq2SeqConfig:
    """The ``model`` section (``family``, a preset, overrides) with the tokenizer's vocabulary.

    ``family`` is ``transformer`` (the default) or ``rnn``.
    """
    fields = dict(run.model)
    family = fields.pop("family", "transformer")
    preset = fields.pop("preset", "small")
    fields.setdefault("src_vocab_size", tokenizer.vocab_size)
    fields.setdefault("tgt_vocab_size", tokenizer.vocab_size)
    for name in ("pad_id", "bos_id", "eos_id"):
        fields.setdefault(name, getattr(tokenizer, name))
    try:
        config = config_from_preset(family, preset, **fields)
    except ConfigError as e:
        raise ConfigError(f"model.{e}") from None
    for name in ("src_vocab_size", "tgt_vocab_size"):  # an id past the table would crash
        if getattr(config, name) < tokenizer.vocab_size:
            raise ConfigError(
                f"model.{name}: {getattr(config, name)} is smaller than the tokenizer's "
                f"vocabulary of {tokenizer.vocab_size}; leave it out (it follows the tokenizer)"
            )
    return config


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``train.precision`` (None = plain fp32)."""
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


@dataclass
class EncodedCorpus:
    """Token ids of the kept training pairs (no BOS/EOS yet)."""

    src: list[list[int]]
    tgt: list[list[int]]
    dropped: int  # pairs longer than data.max_len


def encode_corpus(pairs: Sequence[Pair], tokenizer: Tokenizer, max_len: int) -> EncodedCorpus:
    src = [tokenizer.encode(s) for s, _ in pairs]
    tgt = [tokenizer.encode(t) for _, t in pairs]
    # +1 for EOS on the source and BOS/EOS on the target.
    kept, dropped = filter_by_length(
        [len(s) + 1 for s in src], [len(t) + 1 for t in tgt], max_len=max_len
    )
    return EncodedCorpus([src[i] for i in kept], [tgt[i] for i in kept], dropped)


def check_lengths_fit(config: Seq2SeqConfig, corpus: EncodedCorpus, data_max_len: int) -> None:
    """Refuse, before training, a model whose positions cannot hold the longest pair.

    Counts EOS on the source and BOS (or EOS) on the target, as the batches will.
    """
    longest_src = max((len(s) + 1 for s in corpus.src), default=0)
    longest_tgt = max((len(t) + 1 for t in corpus.tgt), default=0)
    limits = [("max_len", config.max_len, max(longest_src, longest_tgt))]
    if getattr(config, "attention", None) == "luong_location":  # a fixed source width
        limits.append(("max_src_len", config.max_src_len, longest_src))
    for name, limit, longest in limits:
        if longest > limit:
            raise ConfigError(
                f"model.{name}: {limit} positions, but the longest training pair needs "
                f"{longest} (data.max_len={data_max_len}); raise model.{name} or lower "
                "data.max_len"
            )


class TranslationTrainer:
    """The training loop: label-smoothed loss, Adam, warmup schedule, checkpoints, resume."""

    def __init__(
        self,
        run: RunConfig,
        out_dir: str | Path,
        *,
        tokenizer: Tokenizer,
        train_pairs: Sequence[Pair],
        valid_pairs: Sequence[Pair] | None = None,
        device: str | torch.device | None = None,
        progress: bool = True,
        distributed: DistContext | None = None,
    ) -> None:
        self.run = run
        self.cfg = run.train
        self.out_dir = Path(out_dir)
        self.tokenizer = tokenizer
        self.device = resolve_device(device)
        if distributed is not None:  # torchrun: this rank's device
            self.device = distributed.device
        self.dist = distributed if distributed is not None else DistContext(device=self.device)
        self.progress = progress
        self.valid_pairs = list(valid_pairs or [])

        torch.manual_seed(self.cfg.seed)
        self.model_config = model_config_from_run(run, tokenizer)
        self.corpus = encode_corpus(train_pairs, tokenizer, run.data.max_len)
        if not self.corpus.src:
            raise UsageError(
                f"data.max_len: all {len(train_pairs)} training pairs are longer than "
                f"{run.data.max_len} tokens; raise data.max_len"
            )
        check_lengths_fit(self.model_config, self.corpus, run.data.max_len)
        self.model = build_model(self.model_config).to(self.device)
        if self.dist.enabled and self.cfg.distributed == "fsdp" and self.cfg.precision == "fp16":
            raise ConfigError(
                "train.precision: fp16 is not supported with train.distributed=fsdp; use bf16"
            )
        # DDP: a wrapper around self.model; FSDP2: self.model itself, sharded in place
        # (so the optimizer below sees the sharded parameters).
        self._train_model = dist_util.wrap_model(self.model, self.dist, self.cfg.distributed)
        if self.dist.rank > 0:  # same initial weights (seeded above), own dropout masks
            torch.manual_seed(self.cfg.seed + self.dist.rank)
        # train.fast (see attnkit/training/fast.py): fused Adam everywhere it is on;
        # the compiled forward and the chunked loss in single-process runs only.
        self.fast = fast_enabled(self.cfg.fast, self.device)
        self.chunked_loss = (
            self.fast and not self.dist.enabled and isinstance(self.model, EncoderDecoder)
        )
        self.compiled = self.cfg.compile or (self.fast and not self.dist.enabled)
        self.optimizer = build_optimizer(
            self.model,
            lr=self.cfg.lr,
            weight_decay=self.cfg.weight_decay,
            fused=None if self.fast else False,
        )
        self.scheduler = build_scheduler(
            self.optimizer,
            self.cfg.schedule,
            d_model=self.model_config.d_model,
            warmup_steps=self.cfg.warmup_steps,
            factor=self.cfg.lr,
            total_steps=self.cfg.max_steps,
            min_lr=self.cfg.min_lr,
        )
        self.amp_dtype = autocast_dtype(self.cfg.precision, self.device)
        # fp16 needs loss scaling (bf16 does not); GradScaler works on CUDA and the CPU.
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.amp_dtype == torch.float16
        )
        # train.max_tokens is per rank: the global batch (cut identically on every
        # rank, then shared out) holds max_tokens x world_size padded tokens.
        self.sampler = TokenBudgetSampler(
            [len(s) + 1 for s in self.corpus.src],
            [len(t) + 1 for t in self.corpus.tgt],
            max_tokens=self.cfg.max_tokens * self.dist.world_size,
            seed=self.cfg.seed,
        )
        self.step = 0
        self.nonfinite_streak = 0  # updates skipped in a row for a NaN/inf loss or norm
        self.skipped_steps = 0  # all skipped updates (fp16 overflows included)
        self.epoch = 0
        self.batch_in_epoch = 0  # batches of this epoch already consumed (for resume)
        self.metrics_path = self.out_dir / "metrics.jsonl"
        self.records: list[dict[str, Any]] = []

    # -- batches -------------------------------------------------------------------

    def _batches(self) -> Iterator[tuple[TranslationBatch, bool]]:
        """Endless stream of ``(batch, real)``, resuming mid-epoch where the state says.

        ``batch`` is this rank's share of the next global batch. ``real`` is
        False when that share is empty (a global batch with fewer sentences than
        ranks): the batch is then a stand-in, trained on with weight 0, so that
        every rank still joins the gradient all-reduce.
        """
        tok = self.tokenizer
        while True:
            self.sampler.set_epoch(self.epoch)
            batches = list(self.sampler)
            for i in range(self.batch_in_epoch, len(batches)):
                self.batch_in_epoch = i + 1
                idx = self.dist.shard(batches[i])
                real = bool(idx)
                batch = collate_translation(
                    [(self.corpus.src[j], self.corpus.tgt[j]) for j in idx or batches[i][:1]],
                    tok.pad_id,
                    tok.bos_id,
                    tok.eos_id,
                )
                yield batch.to(self.device, non_blocking=True), real
            self.epoch += 1
            self.batch_in_epoch = 0

    # -- one optimisation step -----------------------------------------------------

    def _loss(
        self, batch: TranslationBatch, model: torch.nn.Module | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        model = self.model if model is None else model
        with torch.autocast(
            self.device.type, dtype=self.amp_dtype or torch.float32, enabled=bool(self.amp_dtype)
        ):
            if self.chunked_loss:  # never the whole (B, T, V) logits at once
                hidden = model(batch.src, batch.tgt_in, compute_logits=False).hidden
                out = chunked_label_smoothed_cross_entropy(
                    hidden,
                    self.model.output_proj.weight,
                    batch.tgt_out,
                    epsilon=self.cfg.label_smoothing,
                    ignore_index=self.tokenizer.pad_id,
                    reduction="sum",
                )
                return out.loss, out.nll, int(out.n_tokens)
            logits = model(batch.src, batch.tgt_in).logits
        out = label_smoothed_cross_entropy(
            logits,
            batch.tgt_out,
            epsilon=self.cfg.label_smoothing,
            ignore_index=self.tokenizer.pad_id,
            reduction="sum",
        )
        return out.loss, out.nll, int(out.n_tokens)

    def train_step(self, batches: Iterator[tuple[TranslationBatch, bool]]) -> dict[str, Any]:
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
        ddp = hasattr(model, "no_sync")
        for i in range(self.cfg.grad_accum):
            batch, real = next(batches)
            # DDP all-reduces the gradients once, in the last micro-batch's backward.
            last = i == self.cfg.grad_accum - 1
            with nullcontext() if last or not ddp else model.no_sync():
                with naming_compile_failures(self.compiled):
                    loss, nll, n = self._loss(batch, model)
                if not real:  # a stand-in batch: join the all-reduce, add nothing
                    loss, nll, n = loss * 0.0, nll * 0.0, 0
                self.scaler.scale(loss).backward()
            loss_sum += float(loss.detach())
            nll_sum += float(nll.detach())
            n_tokens += n
        ckpt.kill_point("train_step", self.step + 1)  # test hook; inert unless set
        loss_sum, nll_sum, total = self.dist.sum([loss_sum, nll_sum, n_tokens])
        n_tokens = int(total)
        # Losses are sums and DDP/FSDP average gradients over the ranks, so scaling
        # by world_size / (global token count) makes the update a per-token mean
        # over the global batch, however it was split across ranks and micro-batches.
        factor = self.dist.world_size / max(n_tokens, 1)
        self.scaler.unscale_(self.optimizer)
        params = [p for p in self.model.parameters() if p.grad is not None]
        for p in params:
            p.grad.mul_(factor)
        if self.cfg.clip_norm > 0:
            norm = dist_util.clip_grad_norm(params, self.cfg.clip_norm)
        else:
            norm = dist_util.grad_norm(params)
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
            self._check_nonfinite(skipped)
        return {
            "loss": loss_sum / max(n_tokens, 1),
            "nll": nll_sum / max(n_tokens, 1),
            "tokens": n_tokens,
            "lr": self.optimizer.param_groups[0]["lr"],
            "grad_norm": norm,
            "skipped": skipped,
        }

    def _check_nonfinite(self, what: str) -> None:
        """Warn about a skipped update, or stop once too many were skipped in a row."""
        limit = self.cfg.max_nonfinite
        if self.nonfinite_streak > limit:
            latest = ckpt.latest_checkpoint(self.out_dir) or "none (no checkpoint yet)"
            raise TrainingError(
                f"step {self.step}: {what}, {self.nonfinite_streak} updates in a row "
                f"(more than train.max_nonfinite={limit}); training diverged and was stopped "
                f"without saving; the last good checkpoint is {latest}; "
                "try a lower train.lr, train.precision=fp32 or train.clip_norm=1.0"
            )
        warnings.warn(
            f"step {self.step}: {what}; update skipped "
            f"({self.nonfinite_streak} in a row, train.max_nonfinite={limit})",
            RuntimeWarning,
            stacklevel=3,
        )

    # -- evaluation ----------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Validation loss and perplexity on all pairs, BLEU on the first N (greedy).

        Under torchrun every rank computes the same numbers (FSDP needs all
        ranks in each forward); rank 0 logs them.
        """
        if not self.valid_pairs:
            return {}
        self.model.eval()
        tok = self.tokenizer
        max_len = self.run.data.max_len
        enc = [
            (tok.encode(s)[: max_len - 1], tok.encode(t)[: max_len - 1])
            for s, t in self.valid_pairs
        ]
        loss_sum = nll_sum = 0.0
        n_tokens = 0
        for start in range(0, len(enc), 64):
            batch = collate_translation(enc[start : start + 64], tok.pad_id, tok.bos_id, tok.eos_id)
            batch = batch.to(self.device)
            loss, nll, n = self._loss(batch)
            loss_sum += float(loss)
            nll_sum += float(nll)
            n_tokens += n
        metrics = {
            "loss": loss_sum / max(n_tokens, 1),
            "ppl": math.exp(min(nll_sum / max(n_tokens, 1), 50.0)),
        }
        n_bleu = min(self.cfg.valid_bleu_sentences, len(self.valid_pairs))
        if n_bleu:
            from attnkit.decoding.text import translate_texts
            from attnkit.evaluation.bleu import corpus_scores

            pairs = self.valid_pairs[:n_bleu]
            with dist_util.gathered_parameters(self.model):  # FSDP: decoding needs them all
                hyps = translate_texts(
                    self.model, tok, [s for s, _ in pairs], beam=1, device=self.device
                )
            scores = corpus_scores(
                hyps, [t for _, t in pairs], tokenize=self.run.decode.bleu_tokenize
            )
            metrics["bleu"] = scores["bleu"]
            metrics["exact_match"] = sum(h == t for h, (_, t) in zip(hyps, pairs)) / n_bleu
        return metrics

    # -- checkpoints ---------------------------------------------------------------

    def trainer_state(self) -> dict[str, Any]:
        """Everything besides weights and optimizer that an exact resume needs.

        Under torchrun a collective (every rank's RNG state is gathered).
        """
        state = {
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),  # fp16 loss scale and growth tracker
            "nonfinite_streak": self.nonfinite_streak,
            "skipped_steps": self.skipped_steps,
            "world_size": self.dist.world_size,
            "rng": ckpt.capture_rng_state(),
            "run": self.run.to_dict(),
        }
        if self.dist.enabled:  # each rank's own dropout stream (torch RNGs: small tensors)
            own = {k: v for k, v in state["rng"].items() if k in ("torch", "cuda")}
            state["rng_ranks"] = self.dist.gather(own)
        return state

    def save(self) -> Path:
        """Write ``checkpoints/step_N`` (rank 0; the other ranks wait for it).

        Refuses (``TrainingError``) to write weights holding NaN or inf, so the
        last checkpoint on disk is always a good one.
        """
        directory = ckpt.checkpoint_dir(self.out_dir, self.step)
        if not dist_util.all_finite(list(self.model.parameters()), self.dist):
            latest = ckpt.latest_checkpoint(self.out_dir)
            raise TrainingError(
                f"step {self.step}: the weights hold NaN or inf; not writing a checkpoint; "
                f"the last good checkpoint is {latest or 'none'}; try a lower train.lr, "
                "train.precision=fp32 or train.clip_norm=1.0"
            )
        # FSDP: collectives gathering full tensors onto rank 0 (the single-process format).
        model_state = dist_util.full_model_state(self.model)
        optimizer_state = dist_util.full_optimizer_state(self.model, self.optimizer)
        trainer_state = self.trainer_state()
        if self.dist.is_main:
            ckpt.save_checkpoint(
                directory,
                model_state=model_state,
                config=self.model_config.to_dict(),
                tokenizer_json=self.tokenizer.to_json(),
                trainer_state=trainer_state,
                optimizer_state=optimizer_state,
            )
            self._prune()
        self.dist.barrier()
        return directory

    def _prune(self) -> None:
        if self.cfg.keep_last <= 0:
            return
        steps = sorted((self.out_dir / "checkpoints").glob("step_*"))
        for old in steps[: -self.cfg.keep_last]:
            ckpt.remove_checkpoint(old)

    def resume(self) -> bool:
        """Continue from the latest checkpoint in the run directory, if there is one.

        Hidden leftovers of a killed run (a half-written checkpoint) are removed
        first; ``metrics.jsonl`` is cut back to the checkpoint's step (a torn
        last line is dropped). Under torchrun every rank loads the same checkpoint.
        """
        if self.dist.is_main:
            ckpt.remove_stale_temporaries(self.out_dir)
        self.dist.barrier()
        latest = ckpt.latest_checkpoint(self.out_dir)
        if latest is None:
            return False
        state = ckpt.load_checkpoint(latest)
        if dist_util.is_fsdp(self.model):
            dist_util.load_full_model_state(self.model, state.model_state)
        else:
            ckpt.load_model_state(self.model, state.model_state, source=latest / ckpt.MODEL_FILE)
        if state.optimizer_state is not None:
            if dist_util.is_fsdp(self.model):
                dist_util.load_full_optimizer_state(
                    self.model, self.optimizer, state.optimizer_state
                )
            else:
                self.optimizer.load_state_dict(state.optimizer_state)
        ts = state.trainer_state or {}
        self.step = int(ts["step"])
        self.epoch = int(ts["epoch"])
        self.batch_in_epoch = int(ts["batch_in_epoch"])
        self.nonfinite_streak = int(ts.get("nonfinite_streak", 0))
        self.skipped_steps = int(ts.get("skipped_steps", 0))
        self.scheduler.load_state_dict(ts["scheduler"])
        if ts.get("scaler") and self.scaler.is_enabled():
            self.scaler.load_state_dict(ts["scaler"])
        rng_ranks = ts.get("rng_ranks") or []
        if self.dist.enabled and len(rng_ranks) == self.dist.world_size:
            ckpt.restore_rng_state({**ts["rng"], **rng_ranks[self.dist.rank]})
        else:
            ckpt.restore_rng_state(ts["rng"])
            if self.dist.rank > 0:  # saved with another world size: fresh dropout masks
                torch.manual_seed(self.cfg.seed + self.dist.rank + self.step)
        if self.dist.is_main and self.metrics_path.exists():
            self.records = ckpt.truncate_metrics(self.metrics_path, self.step)
        return True

    # -- logging -------------------------------------------------------------------

    def _log(self, record: dict[str, Any]) -> None:
        if not self.dist.is_main:
            return
        self.records.append(record)
        with self.metrics_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def _plot(self) -> None:
        if not self.dist.is_main:
            return
        try:
            from attnkit.visualize.curves import plot_curves

            plot_curves(self.records, self.out_dir / "loss.png")
        except ImportError:  # matplotlib is optional for the library
            pass

    # -- the loop ------------------------------------------------------------------

    def fit(self, stop_when: Callable[[dict[str, float]], bool] | None = None) -> dict[str, Any]:
        """Train until ``max_steps``, ``max_minutes`` or ``stop_when(valid metrics)``.

        Returns the final step, whether training stopped early, and the last
        validation metrics.
        """
        from tqdm.auto import tqdm

        cfg = self.cfg
        main = self.dist.is_main
        if main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        if self.compiled:  # only the training forward; self.model keeps its state-dict names
            self._train_model = torch.compile(self._train_model)  # type: ignore[assignment]
        batches = self._batches()
        start = time.perf_counter()
        bar = tqdm(
            total=cfg.max_steps,
            initial=self.step,
            disable=not (self.progress and main),
            unit="step",
            dynamic_ncols=True,
        )
        window_tokens, window_start = 0, time.perf_counter()
        last_valid: dict[str, float] = {}
        stopped_early = False
        while self.step < cfg.max_steps:
            stats = self.train_step(batches)
            window_tokens += stats["tokens"]
            bar.update(1)
            if stats["skipped"]:
                self._log({"split": "skipped", "step": self.step, "reason": stats["skipped"]})
            if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                elapsed = time.perf_counter() - window_start
                tok_s = window_tokens / max(elapsed, 1e-9)
                window_tokens, window_start = 0, time.perf_counter()
                self._log({"split": "train", "step": self.step, "epoch": self.epoch,
                           "loss": stats["loss"], "nll": stats["nll"], "lr": stats["lr"],
                           "grad_norm": stats["grad_norm"], "tokens": stats["tokens"],
                           "tokens_per_s": tok_s})  # fmt: skip
                bar.set_postfix(loss=f"{stats['loss']:.3f}", lr=f"{stats['lr']:.2e}",
                                tok_s=f"{tok_s:,.0f}")  # fmt: skip
            out_of_time = cfg.max_minutes is not None and self.dist.from_main(
                time.perf_counter() - start >= 60.0 * cfg.max_minutes
            )  # rank 0's clock decides, so every rank stops at the same step
            last = self.step == cfg.max_steps or out_of_time
            if self.step % cfg.eval_every == 0 or last:
                last_valid = self.evaluate()
                if self.dist.from_main(
                    stop_when is not None and bool(last_valid) and stop_when(last_valid)
                ):
                    out_of_time = last = True  # reached the goal: save and stop
                if last_valid and main:
                    self._log({"split": "valid", "step": self.step, **last_valid})
                    bar.write(
                        f"step {self.step}: "
                        + ", ".join(f"valid {k} {v:.4g}" for k, v in last_valid.items())
                    )
                self._plot()
            if (cfg.save_every and self.step % cfg.save_every == 0) or last:
                self.save()
            if out_of_time:
                stopped_early = True
                break
        bar.close()
        return {"step": self.step, "stopped_early": stopped_early, "valid": last_valid,
                "dropped": self.corpus.dropped}  # fmt: skip


# -- tokenizers and trained models ---------------------------------------------------


def build_tokenizer(cfg: TokenizerConfig, pairs: Sequence[Pair]) -> Tokenizer:
    """Train the configured tokenizer jointly on both sides of ``pairs``."""
    from attnkit.data.tokenizers import BPETokenizer, CharTokenizer

    texts = [s for s, _ in pairs] + [t for _, t in pairs]
    if cfg.kind == "char":
        return CharTokenizer.train(texts)
    return BPETokenizer.train(texts, vocab_size=cfg.vocab_size)
