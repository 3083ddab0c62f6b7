"""The ``train`` section of a run config: the recipe, as a typed dataclass.

The paper's recipe by default; ``__post_init__`` checks every key by name against
its range and the ceilings of ``attnkit.training.config_sections`` (and the keys
that need another, such as ``decay_to_budget`` and ``train.max_minutes``).
``attnkit.training.runconfig`` builds it from the YAML and re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from attnkit.adapters.config import LoRAConfig
from attnkit.training.config_sections import MAX_GRAD_ACCUM, MAX_MINUTES, MAX_THREADS, SEED_LIMIT
from attnkit.training.freeze import check_freeze_entry
from attnkit.validation import at_least, check_fields, in_range, require

__all__ = ["TrainConfig"]


@dataclass
class TrainConfig:
    """The paper's recipe by default: Adam(0.9, 0.98, 1e-9), warmup schedule, eps_ls 0.1."""

    max_steps: int = 100_000
    max_minutes: float | None = None  # stop (and checkpoint) after this wall time
    # cosine schedule only: decay to min_lr exactly when max_minutes runs out (the step
    # count is estimated from the measured speed), not at max_steps: a time-budgeted run
    # ends annealed whatever the machine's speed.
    decay_to_budget: bool = False
    # with decay_to_budget: the warm-up as a share of the steps the budget will reach
    # (re-estimated from the measured speed while it lasts), so a slower or busier
    # machine warms up for proportionally fewer steps; warmup_steps is then only the
    # guess used for the first few steps, before the speed is known. null: fixed steps.
    warmup_fraction: float | None = None
    # Padded tokens per batch and rank (translation: source or target, the longer;
    # lm/mlm: max_tokens // context blocks of the model's context length;
    # image_classification: max_tokens // sequence length images, where an image
    # is its patches plus the class token, e.g. 320 = 64 8x8 digits of 4 + 1).
    max_tokens: int = 4096
    grad_accum: int = 1  # batches per update
    schedule: Literal["noam", "cosine", "constant"] = "noam"
    lr: float = 1.0  # noam: the factor in front of d_model^-0.5 * min(...); else the peak lr
    warmup_steps: int = 4000
    min_lr: float = 0.0
    weight_decay: float = 0.0
    # The learned relative-position terms (T5's bias tables, relative embeddings, Swin's
    # window tables) train at lr x this: Adam moves a table entry ~lr per step, slow for
    # an entry that is itself a score offset (attnkit/training/optim.py says more).
    position_lr_scale: float = 1.0
    # Adam's betas and eps; null: the task's default (translation: the paper's
    # (0.9, 0.98), 1e-9; lm/mlm: nanoGPT's (0.9, 0.99), 1e-8).
    betas: tuple[float, float] | None = None
    eps: float | None = None
    label_smoothing: float = 0.1  # translation (§5.4) and image_classification
    clip_norm: float = 0.0  # 0 = no clipping
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: bf16 on CUDA, else fp32
    seed: int = 1
    # torch's intra-op CPU threads (null: torch's default, one per core). Tiny models
    # (the digits ViT) run several times faster on 1 thread, above all on a busy machine.
    threads: int | None = None
    log_every: int = 50
    eval_every: int = 1000
    save_every: int = 1000
    # with max_minutes: also checkpoint each time the run passes another share of the
    # steps its budget will reach (re-estimated from the speed), e.g. 0.05: every 5%, so
    # the last keep_last checkpoints are the end of the run on any machine. null: off.
    save_fraction: float | None = None
    keep_last: int = 5  # checkpoints kept on disk (0: all)
    valid_bleu_sentences: int = 500  # translation: 0 = no BLEU during training
    eval_blocks: int = 200  # lm/mlm: validation blocks per evaluation
    mask_prob: float = 0.15  # mlm: the share of tokens selected for prediction
    # mlm: BERT's next-sentence prediction beside the masked LM, on sentence pairs (one
    # sentence per line, blank lines between documents), its loss weighted by nsp_weight
    nsp: bool = False
    nsp_weight: float = 1.0
    batch_size: int = 32  # text_classification: examples per batch and rank
    # sentence_similarity with scored pairs: cosine (Sentence-BERT's regression of the
    # cosine on the score) or cosent (Su, 2022: a ranking loss over every two pairs of a
    # batch, the pair with the higher gold score asked for the higher cosine)
    similarity_loss: Literal["cosine", "cosent"] = "cosine"
    # text_classification: examples of similar length share a batch (less padding)
    group_by_length: bool = True
    # Parameters kept as they are (any task): "embeddings", "layers:N" (the first N of
    # every layer stack) or name patterns ("encoder.layers.0", "*.ffn.*"); see
    # attnkit/training/freeze.py.
    freeze: tuple[str, ...] = ()
    compile: bool = False  # always compile the training forward (see also fast)
    # fp32 products on the CPU: oneDNN (1.3-2.3x MKL's sgemm on the AMD EPYC we measure
    # on; bench/NOTES.md) or MKL (PyTorch's default; faster on the Xeon of issue 25).
    # auto: the faster on the first batch, timed once per model and machine
    # (attnkit/kernels/matmul_choice.py); oneDNN under torchrun.
    cpu_matmul: Literal["auto", "onednn", "mkl"] = "auto"
    # auto | on | off: compiled forward, chunked loss, fused Adam (auto: on for CUDA);
    # attnkit/training/fast.py says what each does. `--no-fast` sets off.
    # YAML reads a bare on/off as true/false; both spellings are accepted.
    fast: Literal["auto", "on", "off"] | bool = "auto"
    # torch's fused Adam/AdamW kernel, one pass over every parameter per update (CUDA
    # and CPU; on the 2-core EPYC 4x faster than the per-tensor loop for MiniLM's 23M
    # parameters: bench/NOTES.md). null: as train.fast says (on CUDA only).
    fused_optimizer: bool | None = None
    # Updates skipped in a row for a non-finite loss or gradient norm before training
    # stops with an error (fp16 overflows, which the loss scaler handles, do not count).
    max_nonfinite: int = 10
    # Under torchrun: ddp | fsdp (FSDP2, sharded); see docs/distributed.md.
    distributed: Literal["ddp", "fsdp"] = "ddp"
    # Where metrics go: metrics.jsonl and loss.png always; tensorboard adds event files.
    log_to: tuple[Literal["jsonl", "tensorboard"], ...] = ("jsonl",)
    # LoRA (attnkit.adapters): {rank, alpha, dropout, targets: [q, k, v, o, ffn]} trains
    # low-rank adapters of the --init checkpoint's frozen weights; null: every weight.
    lora: LoRAConfig | None = None

    def __post_init__(self) -> None:
        if self.lora is not None and not isinstance(self.lora, LoRAConfig):
            self.lora = LoRAConfig.from_dict(self.lora)
        check_fields(self)
        if isinstance(self.fast, bool):
            self.fast = "on" if self.fast else "off"
        at_least(self, ("max_steps", "max_tokens", "grad_accum", "log_every", "eval_every"), 1)
        at_least(self, ("eval_blocks", "batch_size"), 1)
        keys = ("save_every", "keep_last", "warmup_steps", "valid_bleu_sentences")
        at_least(self, (*keys, "max_nonfinite"), 0)
        require("lr", self.lr > 0, f"must be > 0, got {self.lr}")
        require("grad_accum", self.grad_accum <= MAX_GRAD_ACCUM,
                f"must be <= {MAX_GRAD_ACCUM}, got {self.grad_accum}; for a larger batch "
                "raise train.max_tokens")  # fmt: skip
        require("seed", 0 <= self.seed < SEED_LIMIT,
                f"must be in [0, 2**63), got {self.seed}")  # fmt: skip
        in_range("label_smoothing", self.label_smoothing, 0.0, 1.0)
        require("clip_norm", self.clip_norm >= 0, f"must be >= 0, got {self.clip_norm}")
        if self.threads is not None:
            require("threads", 1 <= self.threads <= MAX_THREADS,
                    f"must be in [1, {MAX_THREADS}] (or null), got {self.threads}")  # fmt: skip
        if self.max_minutes is not None:
            require("max_minutes", 0 < self.max_minutes <= MAX_MINUTES,
                    f"must be in (0, {MAX_MINUTES:g}], got {self.max_minutes}")  # fmt: skip
        if self.decay_to_budget:
            require("decay_to_budget", self.max_minutes is not None and self.schedule == "cosine",
                    "needs train.max_minutes and train.schedule=cosine")  # fmt: skip
        if self.save_fraction is not None:
            require("save_fraction", self.max_minutes is not None, "needs train.max_minutes")
            require("save_fraction", 0.0 < self.save_fraction < 1.0,
                    f"must be in (0, 1), got {self.save_fraction}")  # fmt: skip
        if self.warmup_fraction is not None:
            require("warmup_fraction", self.decay_to_budget, "needs train.decay_to_budget: true")
            require("warmup_fraction", 0.0 < self.warmup_fraction < 1.0,
                    f"must be in (0, 1), got {self.warmup_fraction}")  # fmt: skip
        if self.betas is not None:
            for beta in self.betas:
                in_range("betas", beta, 0.0, 1.0)
        if self.eps is not None:
            require("eps", self.eps > 0, f"must be > 0, got {self.eps}")
        require("mask_prob", 0.0 < self.mask_prob < 1.0, f"must be in (0, 1), got {self.mask_prob}")
        require("nsp_weight", self.nsp_weight >= 0.0, f"must be >= 0, got {self.nsp_weight}")
        for entry in self.freeze:
            check_freeze_entry(entry)
