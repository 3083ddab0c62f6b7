"""The run configuration of ``attnkit train``: YAML sections as typed dataclasses.

A run file has the sections ``task``, ``data``, ``tokenizer``, ``model``,
``train`` and ``decode``. Every key is checked by the one validator
(``attnkit.validation``): an unknown key names the nearest valid one, a wrong
type or out-of-range value names the field (``train.max_tokens: must be >= 1,
got 0``), and a key that does not apply to the run's task is refused, never
silently ignored (``train.label_smoothing: applies to task translation, not
lm``). ``--set train.max_steps=100`` overrides any key from the command line.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from attnkit.adapters.config import LoRAConfig
from attnkit.errors import ConfigError
from attnkit.training.freeze import check_freeze_entry
from attnkit.validation import at_least, check_fields, from_mapping, in_range, require, suggest

# translation: an encoder-decoder on parallel text; lm: a decoder-only (GPT-style)
# causal LM on one text file; mlm: an encoder-only (BERT-style) masked LM on one;
# image_classification: a Vision Transformer on labelled images; text_classification:
# an encoder-only model labels sentences or sentence pairs; instruction: a pretrained
# decoder-only LM on JSONL conversations, loss on the answers only; span_corruption:
# T5's pre-training of an encoder-decoder on one text file; text_to_text: an
# encoder-decoder on several corpora (pairs, or labelled texts), each with a task prefix.
Task = Literal[
    "translation", "lm", "mlm", "image_classification", "text_classification", "instruction",
    "span_corruption", "text_to_text",
]  # fmt: skip
TASKS: tuple[str, ...] = (
    "translation", "lm", "mlm", "image_classification", "text_classification", "instruction",
    "span_corruption", "text_to_text",
)  # fmt: skip
SEQ2SEQ_TEXT = ("translation", "text_to_text")  # the tasks on text pairs
TEXT_CLASSIFICATION = ("text_classification",)
LM_TASKS = ("lm", "mlm", "span_corruption")  # the tasks on one text file
IMAGE_TASKS = ("image_classification",)

# Keys that only some tasks read, as "section.key" -> those tasks. A run that sets
# one for another task is an error naming the key (an unread key is a silent no-op).
TASK_KEYS: dict[str, tuple[str, ...]] = {
    "data.src_lang": SEQ2SEQ_TEXT,
    "data.tgt_lang": SEQ2SEQ_TEXT,
    "data.train": (*SEQ2SEQ_TEXT, *TEXT_CLASSIFICATION, "instruction"),
    "data.valid": (*SEQ2SEQ_TEXT, *TEXT_CLASSIFICATION, "instruction"),
    "data.test": ("translation",),
    "data.max_len": (*SEQ2SEQ_TEXT, *TEXT_CLASSIFICATION),
    "data.block_size": (*LM_TASKS, "instruction"),
    "data.pack": ("instruction",),
    "data.skip_empty": SEQ2SEQ_TEXT,
    "data.corpora": SEQ2SEQ_TEXT,
    "data.shuffle_buffer": ("translation",),
    "data.text": LM_TASKS,
    "data.valid_fraction": (*LM_TASKS, *IMAGE_TASKS, "instruction"),
    "data.loading": ("translation", *LM_TASKS),
    "data.cache_dir": ("translation", *LM_TASKS),
    "data.images": IMAGE_TASKS,
    "data.labels": IMAGE_TASKS,
    "data.max_shift": IMAGE_TASKS,
    "train.label_smoothing": (*SEQ2SEQ_TEXT, *IMAGE_TASKS),
    "train.valid_bleu_sentences": SEQ2SEQ_TEXT,
    "train.eval_blocks": (*LM_TASKS, "instruction"),
    "train.mask_prob": ("mlm", "span_corruption"),  # span_corruption: the noise density
    "train.nsp": ("mlm",),
    "train.nsp_weight": ("mlm",),
    "train.batch_size": TEXT_CLASSIFICATION,
    "train.group_by_length": TEXT_CLASSIFICATION,
    "decode": SEQ2SEQ_TEXT,
}


@dataclass
class CorpusConfig:
    """One corpus of ``data.corpora``: its folder and its share of the training stream.

    ``text_to_text`` reads more of each (``TEXT_TO_TEXT_CORPUS_KEYS``): ``name``
    (metrics are logged per corpus), the ``prefix`` put before every source
    (``"translate German to English: "``), ``kind`` (``pairs``: parallel text as
    translation reads it; ``labelled``: a labelled TSV/JSONL file whose label is
    the target text), and its ``train``/``valid`` files and ``src_lang``/``tgt_lang``
    (null: those of ``data``).
    """

    dir: str = ""
    weight: float = 1.0
    name: str | None = None
    prefix: str = ""
    kind: Literal["pairs", "labelled"] = "pairs"
    train: str | None = None
    valid: str | None = None
    src_lang: str | None = None
    tgt_lang: str | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        require("dir", bool(self.dir), "each corpus needs its folder (dir)")
        require("weight", self.weight > 0, f"must be > 0, got {self.weight}")


@dataclass
class DataConfig:
    """Where the data is.

    Translation reads parallel text: ``{dir}/{split}.{lang}`` files, or
    ``{dir}/{split}`` if it ends in .tsv or .jsonl (``{"src": .., "tgt": ..}``
    per line); any of them gzip-compressed (``.gz``); ``train`` and ``valid``
    may list several (``[europarl, news.jsonl.gz, "crawl-*.tsv.gz"]``).
    ``corpora`` (``[{dir: .., weight: ..}]``) takes the training split from
    several folders, mixed in proportion to ``weight``. The ``lm`` and
    ``mlm`` tasks read ``{dir}/{text}`` (one file, a list, or JSONL with
    ``{"text": ..}``) and hold out its last ``valid_fraction`` (default 0.1).
    ``image_classification`` reads ``images``: ``digits``
    (scikit-learn's bundled 8x8 digits) or a folder ``{dir}/{images}`` whose
    ``labels`` CSV (``filename,label`` lines; default ``{images}/labels.csv``,
    relative to ``dir``) names its images; a stratified ``valid_fraction``
    (default 0.2, which for the digits is the fixed 1,438 / 359 split) is held out.
    ``text_classification`` reads the labelled TSV or JSONL files ``{dir}/{train}``
    and ``{dir}/{valid}`` (null: none) and cuts examples to ``max_len`` tokens.
    ``instruction`` reads JSONL records from ``{dir}/{train}`` and ``{dir}/{valid}``
    (``valid: null``: the last ``valid_fraction`` of the training records, default
    0.1).

    ``loading`` (translation, lm, mlm): ``prepared`` (default) encodes the
    training data once into memory-mapped token ids in a cache
    (``cache_dir``; default ``$ATTNKIT_CACHE_DIR`` or ``~/.cache/attnkit``)
    that later runs reuse (``attnkit prepare`` does it ahead);
    ``memory`` encodes it into memory on every run; ``streaming``
    (translation) reads and encodes it on the fly, ``shuffle_buffer`` pairs at
    a time, for corpora too large to prepare.
    """

    dir: str = "."
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    train: str | list[str] = "train"
    valid: str | list[str] | None = "valid"
    test: str | None = None
    # tokens; translation: longer training pairs are dropped (and counted);
    # text_classification: longer examples are cut to it (and counted)
    max_len: int = 256
    skip_empty: bool = False
    corpora: tuple[CorpusConfig, ...] | None = None  # translation: weighted training folders
    loading: Literal["prepared", "memory", "streaming"] = "prepared"
    cache_dir: str | None = None  # prepared data (null: $ATTNKIT_CACHE_DIR or ~/.cache/attnkit)
    shuffle_buffer: int = 100_000  # streaming: pairs shuffled and batched together
    text: str | list[str] | None = None  # lm/mlm: the text file(s)
    # lm/mlm: the held-out tail of the text (null: 0.1); image_classification:
    # the stratified held-out share (null: 0.2). held_out_fraction() resolves it.
    valid_fraction: float | None = None
    images: str | None = None  # image_classification: "digits" or a folder
    labels: str | None = None  # image_classification: a folder's labels CSV
    max_shift: int = 0  # image_classification: random shifts of up to n pixels (0: none)
    # lm/mlm: tokens per training block; instruction: the longest sequence (null: the
    # model's context, model.max_len; a pretrained model's is often far longer than needed)
    block_size: int | None = None
    # instruction: records end to end in blocks of block_size tokens (no padding)
    pack: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.corpora, list | tuple):
            self.corpora = tuple(
                c if isinstance(c, CorpusConfig) else from_mapping(CorpusConfig, c, f"corpora[{i}]")
                for i, c in enumerate(self.corpora)
            )
        check_fields(self)
        at_least(self, ("max_len", "shuffle_buffer"), 1)
        at_least(self, ("max_shift",), 0)
        if self.block_size is not None:
            at_least(self, ("block_size",), 1)
        if self.valid_fraction is not None:
            in_range("valid_fraction", self.valid_fraction, 0.0, 1.0)
        if self.corpora is not None:
            require("corpora", len(self.corpora) > 0, "list at least one corpus (or remove it)")

    def one_file(self, split: str, task: str) -> str | None:
        """``train``/``valid`` as the one file the ``task`` reads (a list: an error)."""
        value = getattr(self, split)
        if isinstance(value, list):
            raise ConfigError(
                f"data.{split}: the {task} task reads one file, got a list of {len(value)}"
            )
        return value

    def held_out_fraction(self, task: str) -> float:
        """``valid_fraction``, or the task's default when it is null."""
        if self.valid_fraction is not None:
            return self.valid_fraction
        return 0.2 if task in IMAGE_TASKS else 0.1


# Ceilings checked before anything is built: a BPE trainer allocates for vocab_size
# up front (10**12 aborts inside Rust), a grad_accum of 10**20 batches makes one update
# outlast any train.max_minutes, and torch starts as many threads as it is told.
MAX_VOCAB_SIZE = 1 << 24  # 16.8M; the largest real vocabularies are ~256k
MAX_GRAD_ACCUM = 1024  # batches per update; for a larger batch raise train.max_tokens
MAX_THREADS = 1024
SEED_LIMIT = 1 << 63  # seeds in [0, 2**63): the trainer derives seed + rank + step
MAX_MINUTES = 1e7  # 19 years; 1e308 minutes is an infinite number of seconds


@dataclass
class TokenizerConfig:
    """The vocabulary: trained (``kind``: bpe, char or unigram) or read from ``path``.

    ``path`` (relative to ``data.dir``) reuses a vocabulary: a SentencePiece
    ``.model``, a Hugging Face ``tokenizer.json`` or a tokenizer attnkit
    saved; ``kind`` and ``vocab_size`` are then unused. A trained tokenizer
    sees a seeded random sample of at most ``sample_size`` training records
    (pairs or lines; 0: all of them).
    """

    kind: Literal["bpe", "char", "unigram"] = "bpe"
    vocab_size: int = 8000  # bpe and unigram
    path: str | None = None
    sample_size: int = 1_000_000

    def __post_init__(self) -> None:
        check_fields(self)
        at_least(self, ("vocab_size",), 8)
        require("vocab_size", self.vocab_size <= MAX_VOCAB_SIZE,
                f"must be <= {MAX_VOCAB_SIZE} (2**24), got {self.vocab_size}")  # fmt: skip
        at_least(self, ("sample_size",), 0)


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
    # text_classification: examples of similar length share a batch (less padding)
    group_by_length: bool = True
    # Parameters kept as they are (any task): "embeddings", "layers:N" (the first N of
    # every layer stack) or name patterns ("encoder.layers.0", "*.ffn.*"); see
    # attnkit/training/freeze.py.
    freeze: tuple[str, ...] = ()
    compile: bool = False  # always compile the training forward (see also fast)
    # fp32 products on the CPU: oneDNN (1.3-2.3x MKL's sgemm on the AMD EPYC we measure
    # on; bench/NOTES.md) or MKL (PyTorch's default). auto: oneDNN when available.
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


@dataclass
class DecodeConfig:
    beam: int = 4
    alpha: float = 0.6
    max_len_b: int = 50  # output length limit = source length + max_len_b
    bleu_tokenize: str = "13a"  # sacreBLEU tokenizer for validation BLEU ("char" for compounds)

    def __post_init__(self) -> None:
        check_fields(self)
        at_least(self, ("beam", "max_len_b"), 1)
        # ((5 + |Y|) / 6) ** alpha overflows a float past alpha ~ 130; useful values are 0..2.
        require("alpha", 0 <= self.alpha <= 10, f"must be in [0, 10], got {self.alpha}")


@dataclass
class InitConfig:
    """Where the weights start (``attnkit train --init CKPT``; ``attnkit.training.init``).

    ``init: PATH`` in YAML is short for ``init: {path: PATH}``. When the run
    starts, ``checkpoint`` (the directory ``path`` resolved to), ``sha256`` (of
    its weights), ``family`` and ``step`` are filled in, so ``run.json`` and
    every checkpoint record where the run came from; a config that gives
    ``sha256`` (such as a run's own ``run.json``) refuses other weights.
    """

    path: str
    checkpoint: str | None = None
    sha256: str | None = None
    family: str | None = None
    step: int | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        require("path", bool(self.path), "must name a checkpoint or run directory")


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "tokenizer": TokenizerConfig,
    "train": TrainConfig,
    "decode": DecodeConfig,
}


@dataclass
class RunConfig:
    task: str = "translation"
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    # As written (an empty section: the task's default preset, e.g. "small"); with
    # `init` only the keys named here are checked against the checkpoint's model.
    model: dict[str, Any] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    init: InitConfig | None = None  # start from a checkpoint's weights

    @classmethod
    def from_dict(cls, data: Any) -> RunConfig:
        """Validate a raw mapping (YAML after ``--set``) into a run config."""
        if not isinstance(data, dict):
            raise ConfigError("config: expected a mapping at the top level")
        known = ["task", "model", "init", *SECTIONS]
        for key in data:
            if key not in known:
                raise ConfigError(f"{key}: unknown section{suggest(str(key), known)}")
        task = data.get("task", "translation")
        if task not in TASKS:
            raise ConfigError(f"task: expected one of {', '.join(TASKS)}, got {task!r}")
        model = data.get("model") or {}
        if not isinstance(model, dict):
            raise ConfigError("model: expected a mapping")
        built: dict[str, Any] = {k: from_mapping(c, data.get(k), k) for k, c in SECTIONS.items()}
        _check_task_keys(task, data)
        init = data.get("init")
        if init is not None:
            init = from_mapping(InitConfig, {"path": init} if isinstance(init, str) else init,
                                "init")  # fmt: skip
        return cls(task=task, model=dict(model), init=init, **built)

    def to_dict(self) -> dict[str, Any]:
        """Every key that applies to the task (so a run's ``run.json`` reloads as a config)."""
        data = dataclasses.asdict(self)
        if self.init is None:
            data.pop("init")
        for name, tasks in TASK_KEYS.items():
            if self.task not in tasks:
                section, _, key = name.partition(".")
                if key:
                    data[section].pop(key, None)
                else:
                    data.pop(section, None)
        if self.task != "text_to_text" and data["data"].get("corpora"):
            for corpus in data["data"]["corpora"]:  # keys only text_to_text reads
                for key in TEXT_TO_TEXT_CORPUS_KEYS:
                    corpus.pop(key, None)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


TEXT_TO_TEXT_CORPUS_KEYS = ("name", "prefix", "kind", "train", "valid", "src_lang", "tgt_lang")


def _check_task_keys(task: str, data: dict[str, Any]) -> None:
    """Refuse keys that the run's task never reads (see ``TASK_KEYS``)."""
    corpora = (
        (data.get("data") or {}).get("corpora") if isinstance(data.get("data"), dict) else None
    )
    for i, corpus in enumerate(corpora if isinstance(corpora, list) else []):
        for key in TEXT_TO_TEXT_CORPUS_KEYS:
            if task != "text_to_text" and isinstance(corpus, dict) and key in corpus:
                raise ConfigError(
                    f"data.corpora[{i}].{key}: applies to task text_to_text, not {task}; remove it"
                )
    for name, tasks in TASK_KEYS.items():
        section, _, key = name.partition(".")
        given = data.get(section)
        present = given is not None and (not key or (isinstance(given, dict) and key in given))
        if present and task not in tasks:
            raise ConfigError(
                f"{name}: applies to task {' or '.join(tasks)}, not {task}; remove it"
            )


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"train.max_steps=100"`` -> ``(["train", "max_steps"], 100)`` (value parsed as YAML,
    numbers as users write them: ``train.lr=1e-3`` is a float)."""
    import yaml

    from attnkit.training.config_yaml import parse_yaml

    if "=" not in text:
        raise ConfigError(f"--set {text}: expected key=value, e.g. train.max_steps=1000")
    key, raw = text.split("=", 1)
    if not all(part.strip() for part in key.split(".")):
        raise ConfigError(f"--set {text}: expected SECTION.KEY=VALUE, e.g. train.max_steps=1000")
    try:
        value = parse_yaml(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    except RecursionError:
        raise ConfigError(f"--set {key}: value nested too deeply") from None
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--set`` overrides to the raw config mapping (before validation)."""
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {text}: {part} is not a section")
        node[path[-1]] = value
    return data


def load_run_config(path: str | Path | None, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML run config (or start from defaults), apply overrides, validate."""
    import yaml

    from attnkit.outputs import describe_os_error
    from attnkit.training.config_yaml import parse_yaml

    data: Any = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            found = "is not a regular file" if p.exists() else "config file not found"
            raise ConfigError(f"{p}: {found}")
        try:
            data = parse_yaml(p.read_text(encoding="utf-8")) or {}
        except RecursionError:
            raise ConfigError(f"{p}: nested too deeply to be a run config") from None
        except OSError as e:
            raise ConfigError(f"{p}: cannot read ({describe_os_error(e)})") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"{p}: not UTF-8 text (byte {e.start})") from None
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            line = f" line {where.line + 1}, column {where.column + 1}" if where else ""
            # PyYAML's own words for what is wrong ("mapping values are not allowed here").
            problem = getattr(e, "problem", None) or ""
            detail = f" ({problem})" if problem else ""
            raise ConfigError(f"{p}{line}: not valid YAML{detail}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: expected a mapping at the top level")
    return RunConfig.from_dict(apply_overrides(data, overrides or []))
