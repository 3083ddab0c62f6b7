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
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnkit.data.batching import TokenBudgetSampler, filter_by_length
from attnkit.data.collate import TranslationBatch, collate_translation
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError, UsageError
from attnkit.models import EncoderDecoder, TransformerConfig
from attnkit.training import checkpoint as ckpt
from attnkit.training.losses import label_smoothed_cross_entropy
from attnkit.training.optim import build_optimizer
from attnkit.training.runconfig import RunConfig, TokenizerConfig
from attnkit.training.schedules import build_scheduler

Pair = tuple[str, str]


def model_config_from_run(run: RunConfig, tokenizer: Tokenizer) -> TransformerConfig:
    """The ``model`` section (a preset plus overrides) with the tokenizer's vocabulary."""
    fields = dict(run.model)
    preset = fields.pop("preset", "small")
    fields.setdefault("src_vocab_size", tokenizer.vocab_size)
    fields.setdefault("tgt_vocab_size", tokenizer.vocab_size)
    for name in ("pad_id", "bos_id", "eos_id"):
        fields.setdefault(name, getattr(tokenizer, name))
    try:
        return TransformerConfig.from_preset(preset, **fields)
    except ConfigError as e:
        raise ConfigError(f"model.{e}") from None


def resolve_device(name: str | None = None) -> torch.device:
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


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
    ) -> None:
        self.run = run
        self.cfg = run.train
        self.out_dir = Path(out_dir)
        self.tokenizer = tokenizer
        self.device = resolve_device(device) if not isinstance(device, torch.device) else device
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
        self.model = EncoderDecoder(self.model_config).to(self.device)
        self.optimizer = build_optimizer(
            self.model,
            lr=self.cfg.lr,
            weight_decay=self.cfg.weight_decay,
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
        self.scaler = torch.amp.GradScaler(enabled=self.amp_dtype == torch.float16)
        self.sampler = TokenBudgetSampler(
            [len(s) + 1 for s in self.corpus.src],
            [len(t) + 1 for t in self.corpus.tgt],
            max_tokens=self.cfg.max_tokens,
            seed=self.cfg.seed,
        )
        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0  # batches of this epoch already consumed (for resume)
        self.metrics_path = self.out_dir / "metrics.jsonl"
        self.records: list[dict[str, Any]] = []

    # -- batches -------------------------------------------------------------------

    def _batches(self) -> Iterator[TranslationBatch]:
        """Endless stream of batches, resuming mid-epoch where the state says."""
        tok = self.tokenizer
        while True:
            self.sampler.set_epoch(self.epoch)
            batches = list(self.sampler)
            for i in range(self.batch_in_epoch, len(batches)):
                self.batch_in_epoch = i + 1
                idx = batches[i]
                batch = collate_translation(
                    [(self.corpus.src[j], self.corpus.tgt[j]) for j in idx],
                    tok.pad_id,
                    tok.bos_id,
                    tok.eos_id,
                )
                yield batch.to(self.device, non_blocking=True)
            self.epoch += 1
            self.batch_in_epoch = 0

    # -- one optimisation step -----------------------------------------------------

    def _loss(self, batch: TranslationBatch) -> tuple[torch.Tensor, torch.Tensor, int]:
        with torch.autocast(
            self.device.type, dtype=self.amp_dtype or torch.float32, enabled=bool(self.amp_dtype)
        ):
            logits = self.model(batch.src, batch.tgt_in).logits
        out = label_smoothed_cross_entropy(
            logits,
            batch.tgt_out,
            epsilon=self.cfg.label_smoothing,
            ignore_index=self.tokenizer.pad_id,
            reduction="sum",
        )
        return out.loss, out.nll, int(out.n_tokens)

    def train_step(self, batches: Iterator[TranslationBatch]) -> dict[str, float]:
        self.model.train()
        loss_sum = nll_sum = 0.0
        n_tokens = 0
        for _ in range(self.cfg.grad_accum):
            batch = next(batches)
            loss, nll, n = self._loss(batch)
            self.scaler.scale(loss).backward()
            loss_sum += float(loss.detach())
            nll_sum += float(nll.detach())
            n_tokens += n
        # Losses are sums; dividing gradients by the token count makes the
        # update a per-token mean however the batch was split.
        inv = 1.0 / max(n_tokens, 1)
        self.scaler.unscale_(self.optimizer)
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.mul_(inv)
        if self.cfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.step += 1
        return {
            "loss": loss_sum / max(n_tokens, 1),
            "nll": nll_sum / max(n_tokens, 1),
            "tokens": n_tokens,
            "lr": self.optimizer.param_groups[0]["lr"],
        }

    # -- evaluation ----------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Validation loss and perplexity on all pairs, BLEU on the first N (greedy)."""
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
        return {
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": ckpt.capture_rng_state(),
            "run": self.run.to_dict(),
        }

    def save(self) -> Path:
        directory = ckpt.checkpoint_dir(self.out_dir, self.step)
        ckpt.save_checkpoint(
            directory,
            model_state=self.model.state_dict(),
            config=self.model_config.to_dict(),
            tokenizer_json=self.tokenizer.to_json(),
            trainer_state=self.trainer_state(),
            optimizer_state=self.optimizer.state_dict(),
        )
        self._prune()
        return directory

    def _prune(self) -> None:
        if self.cfg.keep_last <= 0:
            return
        steps = sorted((self.out_dir / "checkpoints").glob("step_*"))
        for old in steps[: -self.cfg.keep_last]:
            ckpt.remove_checkpoint(old)

    def resume(self) -> bool:
        """Continue from the latest checkpoint in the run directory, if there is one."""
        latest = ckpt.latest_checkpoint(self.out_dir)
        if latest is None:
            return False
        state = ckpt.load_checkpoint(latest)
        self.model.load_state_dict(state.model_state)
        if state.optimizer_state is not None:
            self.optimizer.load_state_dict(state.optimizer_state)
        ts = state.trainer_state or {}
        self.step = int(ts["step"])
        self.epoch = int(ts["epoch"])
        self.batch_in_epoch = int(ts["batch_in_epoch"])
        self.scheduler.load_state_dict(ts["scheduler"])
        self.scaler.load_state_dict(ts["scaler"])
        ckpt.restore_rng_state(ts["rng"])
        if self.metrics_path.exists():
            self.records = [
                json.loads(line)
                for line in self.metrics_path.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= self.step
            ]
            self._rewrite_metrics()
        return True

    # -- logging -------------------------------------------------------------------

    def _log(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        with self.metrics_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def _rewrite_metrics(self) -> None:
        text = "".join(json.dumps(r) + "\n" for r in self.records)
        tmp = self.metrics_path.with_suffix(".jsonl.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(self.metrics_path)

    def _plot(self) -> None:
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
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if cfg.compile:
            self.model = torch.compile(self.model)  # type: ignore[assignment]
        batches = self._batches()
        start = time.perf_counter()
        bar = tqdm(
            total=cfg.max_steps,
            initial=self.step,
            disable=not self.progress,
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
            if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                elapsed = time.perf_counter() - window_start
                tok_s = window_tokens / max(elapsed, 1e-9)
                window_tokens, window_start = 0, time.perf_counter()
                self._log({"split": "train", "step": self.step, "epoch": self.epoch,
                           "loss": stats["loss"], "nll": stats["nll"], "lr": stats["lr"],
                           "tokens_per_s": tok_s})  # fmt: skip
                bar.set_postfix(loss=f"{stats['loss']:.3f}", lr=f"{stats['lr']:.2e}",
                                tok_s=f"{tok_s:,.0f}")  # fmt: skip
            out_of_time = (
                cfg.max_minutes is not None
                and time.perf_counter() - start >= 60.0 * cfg.max_minutes
            )
            last = self.step == cfg.max_steps or out_of_time
            if self.step % cfg.eval_every == 0 or last:
                last_valid = self.evaluate()
                if stop_when is not None and last_valid and stop_when(last_valid):
                    out_of_time = last = True  # reached the goal: save and stop
                if last_valid:
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


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory, or a run directory (its latest checkpoint)."""
    from attnkit.errors import CheckpointError

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory not found")
    if (path / "config.json").exists() or (path / "model.safetensors").exists():
        return path
    latest = ckpt.latest_checkpoint(path)
    if latest is None:
        raise CheckpointError(f"{path}: holds no checkpoint (no config.json, no checkpoints/)")
    return latest


def load_tokenizer(run_or_checkpoint: str | Path) -> Tokenizer | None:
    """The tokenizer saved in a run's latest checkpoint (None if there is none yet)."""
    from attnkit.data.tokenizers import tokenizer_from_json

    path = Path(run_or_checkpoint)
    directory = path if (path / "tokenizer.json").exists() else ckpt.latest_checkpoint(path)
    if directory is None:
        return None
    return tokenizer_from_json(ckpt.load_checkpoint(directory).tokenizer_json)


def load_translation_model(
    path: str | Path, device: str | torch.device | None = None
) -> tuple[EncoderDecoder, Tokenizer]:
    """Model (in eval mode) and tokenizer from a checkpoint or run directory."""
    from attnkit.data.tokenizers import tokenizer_from_json
    from attnkit.errors import CheckpointError

    directory = resolve_checkpoint(path)
    state = ckpt.load_checkpoint(directory)
    try:
        config = TransformerConfig.from_dict(state.config)
    except ConfigError as e:
        raise CheckpointError(f"{directory / 'config.json'}: {e}") from None
    if state.tokenizer_json is None:
        raise CheckpointError(f"{directory / 'tokenizer.json'}: missing; cannot read text")
    tokenizer = tokenizer_from_json(state.tokenizer_json)
    if tokenizer.vocab_size != config.tgt_vocab_size:
        raise CheckpointError(
            f"{directory / 'tokenizer.json'}: vocabulary of {tokenizer.vocab_size} does not "
            f"match the model's tgt_vocab_size={config.tgt_vocab_size}"
        )
    model = EncoderDecoder(config)
    ckpt.load_model_state(model, state.model_state, source=directory / "model.safetensors")
    return model.to(
        resolve_device(device) if not isinstance(device, torch.device) else device
    ).eval(), tokenizer
