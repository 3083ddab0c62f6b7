"""Training a decoder-only language model on one text file (nanoGPT's recipe, small).

``train_lm`` runs the loop: random blocks from ``attnkit.data.lm``, next-token
cross-entropy, Adam(W) with a warmup schedule, gradient clipping, periodic
validation loss on fixed blocks, ``metrics.jsonl`` and checkpoints::

    OUT/
      metrics.jsonl                 {"split": "train"|"valid", "step": ..., "loss": ...}
      checkpoints/step_00001000/    model.safetensors config.json tokenizer.json ...

A checkpoint's ``config.json`` is ``DecoderOnlyConfig.to_dict()`` (family
``"decoder_only"``), so ``attnkit generate --checkpoint`` and
``load_decoder_only`` rebuild the model from it alone.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from attnkit.data.lm import LMBlocks, LMCorpus
from attnkit.data.tokenizers import Tokenizer, tokenizer_from_json
from attnkit.errors import CheckpointError, ConfigError
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.training import checkpoint as ckpt
from attnkit.training.optim import build_optimizer
from attnkit.training.schedules import build_scheduler


@dataclass(frozen=True)
class LMTrainConfig:
    """Optimisation settings. Defaults follow nanoGPT's shakespeare_char run."""

    batch_size: int = 64
    max_steps: int = 5000
    lr: float = 1e-3
    min_lr: float = 1e-4
    schedule: str = "cosine"  # "cosine", "constant" or "noam" (see build_scheduler)
    warmup_steps: int = 100
    betas: tuple[float, float] = (0.9, 0.99)
    weight_decay: float = 0.1
    clip_norm: float = 1.0
    log_every: int = 10
    eval_every: int = 250
    eval_blocks: int = 200  # validation blocks per evaluation
    save_every: int = 0  # 0: only at the end
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_steps", "log_every", "eval_every", "eval_blocks"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.save_every < 0:
            raise ConfigError(f"save_every: must be >= 0, got {self.save_every}")


def _resolve_device(device: str | torch.device | None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@torch.no_grad()
def evaluate_lm(model: DecoderOnlyLM, blocks: LMBlocks, *, batch_size: int, max_blocks: int):
    """Mean next-token loss and perplexity over the first ``max_blocks`` blocks."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for x, y in blocks.sequential(batch_size, max_blocks=max_blocks):
        logits = model(x.to(device)).logits
        total += float(
            F.cross_entropy(logits.flatten(0, 1), y.to(device).flatten(), reduction="sum")
        )
        count += y.numel()
    model.train(was_training)
    loss = total / max(count, 1)
    return {"loss": loss, "ppl": math.exp(min(loss, 50.0))}


def train_lm(
    model: DecoderOnlyLM,
    corpus: LMCorpus,
    out_dir: str | Path,
    cfg: LMTrainConfig | None = None,
    *,
    device: str | torch.device | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train ``model`` on ``corpus`` (blocks of ``model.config.max_len`` tokens).

    Returns the final step, the last training loss and the last validation
    metrics (empty when the validation split is shorter than one block).
    """
    from tqdm.auto import tqdm

    cfg = cfg or LMTrainConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics_path = out / "metrics.jsonl"
    device = _resolve_device(device)
    torch.manual_seed(cfg.seed)  # dropout masks
    model.to(device).train()
    block_size = model.config.max_len
    train_blocks = LMBlocks(corpus.train, block_size, name="train split")
    valid_blocks = (
        LMBlocks(corpus.valid, block_size, name="valid split")
        if corpus.valid.numel() > block_size
        else None
    )
    optimizer = build_optimizer(
        model, lr=cfg.lr, betas=cfg.betas, eps=1e-8, weight_decay=cfg.weight_decay
    )
    scheduler = build_scheduler(
        optimizer,
        cfg.schedule,
        d_model=model.config.d_model,
        warmup_steps=cfg.warmup_steps,
        factor=cfg.lr,
        total_steps=cfg.max_steps,
        min_lr=cfg.min_lr,
    )

    def log(record: dict[str, Any]) -> None:
        with metrics_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def save(step: int) -> None:
        ckpt.save_checkpoint(
            ckpt.checkpoint_dir(out, step),
            model_state=model.state_dict(),
            config=model.config.to_dict(),
            tokenizer_json=corpus.tokenizer.to_json(),
            trainer_state={"step": step, "train": dataclasses.asdict(cfg)},
            optimizer_state=optimizer.state_dict(),
        )

    batches = train_blocks.batches(cfg.batch_size, seed=cfg.seed)
    bar = tqdm(total=cfg.max_steps, disable=not progress, unit="step", dynamic_ncols=True)
    valid: dict[str, float] = {}
    loss_value = math.nan
    window_start, window_tokens = time.perf_counter(), 0
    for step in range(1, cfg.max_steps + 1):
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        logits = model(x).logits
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        if cfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        window_tokens += y.numel()
        bar.update(1)
        if step % cfg.log_every == 0 or step == cfg.max_steps:
            loss_value = float(loss.detach())
            lr = optimizer.param_groups[0]["lr"]
            tok_s = window_tokens / max(time.perf_counter() - window_start, 1e-9)
            window_start, window_tokens = time.perf_counter(), 0
            log({"split": "train", "step": step, "loss": loss_value, "lr": lr,
                 "tokens_per_s": tok_s})  # fmt: skip
            bar.set_postfix(loss=f"{loss_value:.3f}", lr=f"{lr:.2e}")
        last = step == cfg.max_steps
        if valid_blocks is not None and (step % cfg.eval_every == 0 or last):
            valid = evaluate_lm(
                model, valid_blocks, batch_size=cfg.batch_size, max_blocks=cfg.eval_blocks
            )
            log({"split": "valid", "step": step, **valid})
            if progress:
                bar.write(f"step {step}: valid loss {valid['loss']:.4f}, ppl {valid['ppl']:.2f}")
        if (cfg.save_every and step % cfg.save_every == 0) or last:
            save(step)
    bar.close()
    return {"step": cfg.max_steps, "train_loss": loss_value, "valid": valid}


def load_decoder_only(
    path: str | Path, device: str | torch.device | None = None
) -> tuple[DecoderOnlyLM, Tokenizer]:
    """Model (eval mode) and tokenizer from a checkpoint or a run directory (its latest)."""
    directory = Path(path)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: checkpoint directory not found")
    if not (directory / ckpt.CONFIG_FILE).exists():
        latest = ckpt.latest_checkpoint(directory)
        if latest is None:
            raise CheckpointError(f"{directory}: holds no checkpoint (no config.json)")
        directory = latest
    state = ckpt.load_checkpoint(directory, load_optimizer=False)
    try:
        config = DecoderOnlyConfig.from_dict(state.config)
    except ConfigError as e:
        raise CheckpointError(f"{directory / ckpt.CONFIG_FILE}: {e}") from None
    if state.tokenizer_json is None:
        raise CheckpointError(f"{directory / ckpt.TOKENIZER_FILE}: missing; cannot read text")
    tokenizer = tokenizer_from_json(state.tokenizer_json)
    if tokenizer.vocab_size > config.vocab_size:
        raise CheckpointError(
            f"{directory / ckpt.TOKENIZER_FILE}: vocabulary of {tokenizer.vocab_size} does "
            f"not fit the model's vocab_size={config.vocab_size}"
        )
    model = DecoderOnlyLM(config)
    ckpt.load_model_state(model, state.model_state, source=directory / ckpt.MODEL_FILE)
    return model.to(_resolve_device(device)).eval(), tokenizer
