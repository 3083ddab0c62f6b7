"""Training the single-stack models on one text file: causal LM (GPT) or masked LM (BERT).

``train_lm`` runs one loop for both objectives, picked by the model's type:

* ``DecoderOnlyLM``: next-token cross-entropy on random blocks (nanoGPT's recipe);
* ``EncoderOnlyModel``: the masked-LM objective (15% of tokens selected,
  80/10/10 mask/random/keep; ``attnkit.data.mlm``), loss on selected positions only.

Around it: Adam(W) with a warmup schedule, gradient clipping, bf16 autocast on
CUDA, periodic validation on fixed blocks (fixed masks for MLM, so the number
is comparable between evaluations), ``metrics.jsonl`` and checkpoints::

    OUT/
      metrics.jsonl                 {"split": "train"|"valid", "step": ..., "loss": ...}
      checkpoints/step_00001000/    model.safetensors config.json tokenizer.json ...

A checkpoint's ``config.json`` is the model config's ``to_dict()`` (family
``"decoder_only"`` or ``"encoder_only"``), so ``attnkit generate --checkpoint``
and ``load_decoder_only`` rebuild the model from it alone.
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
from attnkit.data.mlm import IGNORE_INDEX, mask_tokens, mlm_vocab
from attnkit.data.tokenizers import UNK_ID, Tokenizer
from attnkit.errors import CheckpointError, ConfigError, UsageError
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.encoder_only import EncoderOnlyModel
from attnkit.models.lm_config import DecoderOnlyConfig, EncoderOnlyConfig
from attnkit.training import checkpoint as ckpt
from attnkit.training.fast import FAST_MODES, fast_enabled, naming_compile_failures
from attnkit.training.loading import resolve_device
from attnkit.training.optim import build_optimizer
from attnkit.training.runconfig import RunConfig
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
    max_minutes: float | None = None  # stop (and checkpoint) after this wall time
    precision: str = "auto"  # auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16
    # auto | on | off (attnkit/training/fast.py): a compiled causal-LM step and fused
    # AdamW; auto is on for CUDA. Masked LMs pick a data-dependent number of tokens,
    # so only the fused optimizer applies to them.
    fast: str = "auto"
    mask_prob: float = 0.15  # MLM only: the share of tokens selected

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_steps", "log_every", "eval_every", "eval_blocks"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.save_every < 0:
            raise ConfigError(f"save_every: must be >= 0, got {self.save_every}")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ConfigError(f"max_minutes: must be > 0, got {self.max_minutes}")
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ConfigError(f"precision: expected auto, fp32 or bf16, got {self.precision!r}")
        if self.fast not in FAST_MODES:
            raise ConfigError(f"fast: expected auto, on or off, got {self.fast!r}")
        if not 0.0 < self.mask_prob < 1.0:
            raise ConfigError(f"mask_prob: must be in (0, 1), got {self.mask_prob}")


LanguageModel = DecoderOnlyLM | EncoderOnlyModel


def _special_ids(model: EncoderOnlyModel) -> list[int]:
    c = model.config
    return [c.pad_id, c.bos_id, c.eos_id, UNK_ID]


def objective_loss(
    model: LanguageModel,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    mask_prob: float = 0.15,
    generator: torch.Generator | None = None,
    reduction: str = "mean",
) -> tuple[torch.Tensor, int]:
    """The model's training loss on one batch of blocks, and how many tokens it scores.

    ``x``/``y`` ``(B, T)``: a block and the same block shifted by one. A causal
    LM predicts ``y`` from ``x``; a masked LM corrupts ``x`` (``generator``
    draws the mask, on ``x``'s device) and predicts the original tokens at
    the selected positions only.
    """
    if isinstance(model, DecoderOnlyLM):
        return causal_lm_loss(model, x, y, reduction=reduction), y.numel()
    c = model.config
    inputs, labels = mask_tokens(
        x,
        vocab_size=c.vocab_size,
        mask_id=c.mask_id,
        special_ids=_special_ids(model),
        prob=mask_prob,
        generator=generator,
    )
    hidden = model(inputs, mlm=False, classify=False).hidden
    selected = labels != IGNORE_INDEX
    # Project only the selected positions: ~15% of the (B*T, V) logits.
    logits = model.mlm_head(hidden[selected])
    count = int(selected.sum())
    if count == 0:  # a tiny batch may select nothing; keep the graph, add zero
        return hidden.sum() * 0.0, 0
    return F.cross_entropy(logits.float(), labels[selected], reduction=reduction), count


def causal_lm_loss(
    model: DecoderOnlyLM, x: torch.Tensor, y: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """Next-token cross-entropy of ``model`` reading ``x (B, T)`` against ``y (B, T)``."""
    logits = model(x).logits
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction=reduction)


@torch.no_grad()
def evaluate_lm(
    model: LanguageModel,
    blocks: LMBlocks,
    *,
    batch_size: int,
    max_blocks: int,
    mask_prob: float = 0.15,
    seed: int = 0,
):
    """Mean loss per scored token and perplexity over the first ``max_blocks`` blocks.

    For a masked LM the masks come from ``seed``, so two evaluations of the
    same weights give the same number.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    total, count = 0.0, 0
    for x, y in blocks.sequential(batch_size, max_blocks=max_blocks):
        loss, n = objective_loss(
            model,
            x.to(device),
            y.to(device),
            mask_prob=mask_prob,
            generator=generator,
            reduction="sum",
        )
        total += float(loss)
        count += n
    model.train(was_training)
    loss = total / max(count, 1)
    return {"loss": loss, "ppl": math.exp(min(loss, 50.0))}


def train_lm(
    model: LanguageModel,
    corpus: LMCorpus,
    out_dir: str | Path,
    cfg: LMTrainConfig | None = None,
    *,
    device: str | torch.device | None = None,
    progress: bool = True,
    resume: bool = False,
) -> dict[str, Any]:
    """Train ``model`` on ``corpus`` (blocks of ``model.config.max_len`` tokens).

    The objective follows the model: causal LM for ``DecoderOnlyLM``, masked
    LM for ``EncoderOnlyModel``. Returns the final step, the last training
    loss and the last validation metrics (empty when the validation split is
    shorter than one block).

    ``resume=True`` continues from the latest checkpoint in ``out_dir``
    (weights, optimizer, schedule, the batch stream, the masking and dropout
    RNGs), so that stopping and resuming gives the same weights as one run.
    """
    from tqdm.auto import tqdm

    cfg = cfg or LMTrainConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics_path = out / "metrics.jsonl"
    device = resolve_device(device)
    torch.manual_seed(cfg.seed)  # dropout masks
    model.to(device).train()
    block_size = model.config.max_len
    train_blocks = LMBlocks(corpus.train, block_size, name="train split")
    valid_blocks = (
        LMBlocks(corpus.valid, block_size, name="valid split")
        if corpus.valid.numel() > block_size
        else None
    )
    fast = fast_enabled(cfg.fast, device)
    optimizer = build_optimizer(
        model,
        lr=cfg.lr,
        betas=cfg.betas,
        eps=1e-8,
        weight_decay=cfg.weight_decay,
        fused=None if fast else False,
    )
    compiled_loss = (
        torch.compile(causal_lm_loss) if fast and isinstance(model, DecoderOnlyLM) else None
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

    batch_generator = torch.Generator().manual_seed(cfg.seed)
    mask_generator = torch.Generator(device=device).manual_seed(cfg.seed + 1)

    def save(step: int) -> None:
        ckpt.save_checkpoint(
            ckpt.checkpoint_dir(out, step),
            model_state=model.state_dict(),
            config=model.config.to_dict(),
            tokenizer_json=corpus.tokenizer.to_json(),
            trainer_state={
                "step": step,
                "train": dataclasses.asdict(cfg),
                "scheduler": scheduler.state_dict(),
                "rng": ckpt.capture_rng_state(),  # dropout
                "batch_rng": batch_generator.get_state(),
                "mask_rng": mask_generator.get_state(),
            },
            optimizer_state=optimizer.state_dict(),
        )

    first_step = 1
    if resume:
        first_step = _restore(out, model, optimizer, scheduler, batch_generator, mask_generator)
        ckpt.truncate_metrics(metrics_path, first_step - 1)
    batches = train_blocks.batches(cfg.batch_size, generator=batch_generator)
    precision = (
        cfg.precision if cfg.precision != "auto" else ("bf16" if device.type == "cuda" else "fp32")
    )
    autocast = torch.autocast(device.type, torch.bfloat16, enabled=precision == "bf16")
    deadline = None if cfg.max_minutes is None else time.monotonic() + 60.0 * cfg.max_minutes
    last_step = cfg.max_steps
    bar = tqdm(
        total=cfg.max_steps,
        initial=first_step - 1,
        disable=not progress,
        unit="step",
        dynamic_ncols=True,
    )
    valid: dict[str, float] = {}
    loss_value = math.nan
    window_start, window_tokens = time.perf_counter(), 0
    for step in range(first_step, cfg.max_steps + 1):
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast:
            if compiled_loss is not None:
                with naming_compile_failures(True):
                    loss = compiled_loss(model, x, y)
            else:
                loss, _ = objective_loss(
                    model, x, y, mask_prob=cfg.mask_prob, generator=mask_generator
                )
        loss.backward()
        ckpt.kill_point("train_step", step)  # test hook; inert unless set
        if cfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        window_tokens += y.numel()
        bar.update(1)
        if (
            step % cfg.log_every == 0
            or step == cfg.max_steps
            or (deadline is not None and time.monotonic() >= deadline)
        ):
            loss_value = float(loss.detach())
            lr = optimizer.param_groups[0]["lr"]
            tok_s = window_tokens / max(time.perf_counter() - window_start, 1e-9)
            window_start, window_tokens = time.perf_counter(), 0
            log({"split": "train", "step": step, "loss": loss_value, "lr": lr,
                 "tokens_per_s": tok_s})  # fmt: skip
            bar.set_postfix(loss=f"{loss_value:.3f}", lr=f"{lr:.2e}")
        out_of_time = deadline is not None and time.monotonic() >= deadline
        last = step == cfg.max_steps or out_of_time
        if valid_blocks is not None and (step % cfg.eval_every == 0 or last):
            with autocast:
                valid = evaluate_lm(
                    model,
                    valid_blocks,
                    batch_size=cfg.batch_size,
                    max_blocks=cfg.eval_blocks,
                    mask_prob=cfg.mask_prob,
                    seed=cfg.seed,
                )
            log({"split": "valid", "step": step, **valid})
            if progress:
                bar.write(f"step {step}: valid loss {valid['loss']:.4f}, ppl {valid['ppl']:.2f}")
        if (cfg.save_every and step % cfg.save_every == 0) or last:
            save(step)
        if out_of_time:
            last_step = step
            if progress:
                bar.write(f"stopping at step {step}: train.max_minutes={cfg.max_minutes} reached")
            break
    bar.close()
    return {"step": last_step, "train_loss": loss_value, "valid": valid}


def _restore(
    out: Path,
    model: LanguageModel,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    batch_generator: torch.Generator,
    mask_generator: torch.Generator,
) -> int:
    """Load the latest checkpoint of ``out`` into the training objects; the next step."""
    ckpt.remove_stale_temporaries(out)  # a checkpoint half-written when a run was killed
    latest = ckpt.latest_checkpoint(out)
    if latest is None:
        raise UsageError(f"--resume: {out} holds no checkpoint to resume from")
    state = ckpt.load_checkpoint(latest)
    ts = state.trainer_state or {}
    if "batch_rng" not in ts:
        raise CheckpointError(
            f"{latest}: written by an attnkit that could not resume language models; "
            "start a new run"
        )
    ckpt.load_model_state(model, state.model_state, source=latest / ckpt.MODEL_FILE)
    if state.optimizer_state is not None:
        optimizer.load_state_dict(state.optimizer_state)
    scheduler.load_state_dict(ts["scheduler"])
    ckpt.restore_rng_state(ts["rng"])
    batch_generator.set_state(ts["batch_rng"].to("cpu", torch.uint8))
    mask_generator.set_state(ts["mask_rng"].to("cpu", torch.uint8))
    return int(ts["step"]) + 1


def language_model_from_run(run: RunConfig, tokenizer: Tokenizer) -> LanguageModel:
    """The ``model`` section (a preset plus overrides) sized to ``tokenizer``.

    ``task: lm`` builds a ``DecoderOnlyLM``, ``task: mlm`` an
    ``EncoderOnlyModel`` with one extra id for the mask token and no
    classification head (``num_labels: 0`` unless the section says otherwise).
    """
    fields = dict(run.model)
    preset = fields.pop("preset", "small")
    for name in ("pad_id", "bos_id", "eos_id"):
        fields.setdefault(name, getattr(tokenizer, name))
    try:
        if run.task == "lm":
            fields.setdefault("vocab_size", tokenizer.vocab_size)
            return DecoderOnlyLM(DecoderOnlyConfig.from_preset(preset, **fields))
        if run.task == "mlm":
            vocab_size, mask_id = mlm_vocab(tokenizer)
            fields.setdefault("vocab_size", vocab_size)
            fields.setdefault("mask_id", mask_id)
            fields.setdefault("num_labels", 0)
            return EncoderOnlyModel(EncoderOnlyConfig.from_preset(preset, **fields))
    except ConfigError as e:
        raise ConfigError(f"model.{e}") from None
    raise ConfigError(f"task: expected lm or mlm here, got {run.task!r}")


def lm_train_config_from_run(run: RunConfig, block_size: int) -> LMTrainConfig:
    """The ``train`` section for a language model.

    ``train.max_tokens`` becomes the number of blocks per batch
    (``max_tokens // block_size``, at least 1). Translation-only keys
    (``label_smoothing``, ``keep_last``, ``valid_bleu_sentences``, ...) are unused.
    """
    t = run.train
    if t.precision == "fp16":
        raise ConfigError("train.precision: fp16 is for translation runs; use bf16 or fp32 here")
    return LMTrainConfig(
        batch_size=max(1, t.max_tokens // block_size),
        max_steps=t.max_steps,
        lr=t.lr,
        min_lr=t.min_lr,
        schedule=t.schedule,
        warmup_steps=t.warmup_steps,
        weight_decay=t.weight_decay,
        clip_norm=t.clip_norm,
        log_every=t.log_every,
        eval_every=t.eval_every,
        save_every=t.save_every,
        seed=t.seed,
        max_minutes=t.max_minutes,
        precision=t.precision,
        fast=t.fast,
    )
