"""The sections of a run config other than ``train``: ``data`` (and its ``corpora``),
``tokenizer``, ``decode`` and ``init``, as typed dataclasses, with the ceilings the
sections check their numbers against.

Each checks its own keys when built (``attnkit.validation``: an unknown key names
the nearest valid one, a wrong type or value names the field);
``attnkit.training.runconfig`` builds them from the YAML and re-exports them.
``train`` is ``attnkit.training.config_train``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from attnkit.errors import ConfigError
from attnkit.training.config_hf_dataset import HFDatasetConfig
from attnkit.training.config_tasks import IMAGE_TASKS
from attnkit.validation import at_least, check_fields, from_mapping, in_range, require

__all__ = [
    "MAX_GRAD_ACCUM",
    "MAX_MINUTES",
    "MAX_THREADS",
    "MAX_VOCAB_SIZE",
    "SEED_LIMIT",
    "CorpusConfig",
    "DataConfig",
    "DecodeConfig",
    "InitConfig",
    "TokenizerConfig",
]


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
    and ``{dir}/{valid}`` (null: none) and cuts examples to ``max_len`` tokens;
    ``token_classification`` reads CoNLL or JSONL tagged sentences the same way
    (``tag_scheme``: IOB1, IOB2/BIO, BIOES, or ``auto``).
    ``instruction`` reads JSONL records from ``{dir}/{train}`` and ``{dir}/{valid}``
    (``valid: null``: the last ``valid_fraction`` of the training records, default
    0.1).
    ``hf_dataset`` (``HFDatasetConfig``) reads a Hugging Face ``datasets`` dataset
    (or local Parquet/CSV/JSON through it) instead of files, for translation,
    lm/mlm and text_classification.

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
    doc_stride: int = 128  # question_answering: context tokens consecutive windows share
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
    # mlm with train.nsp: what a document is, for NotNext pairs: "blank_lines" (paragraphs,
    # BERT's articles) or "file" (the whole text one document: B from anywhere else)
    documents: Literal["blank_lines", "file"] = "blank_lines"
    # a Hugging Face `datasets` dataset instead of files (translation, lm/mlm, classification)
    hf_dataset: HFDatasetConfig | None = None
    # token_classification: the files' entity tag scheme (auto: detected; kept as BIO)
    tag_scheme: Literal["auto", "iob1", "iob2", "bio", "bioes"] = "auto"

    def __post_init__(self) -> None:
        if isinstance(self.hf_dataset, dict):
            self.hf_dataset = from_mapping(HFDatasetConfig, self.hf_dataset, "hf_dataset")
        if isinstance(self.corpora, list | tuple):
            self.corpora = tuple(
                c if isinstance(c, CorpusConfig) else from_mapping(CorpusConfig, c, f"corpora[{i}]")
                for i, c in enumerate(self.corpora)
            )
        check_fields(self)
        at_least(self, ("max_len", "shuffle_buffer"), 1)
        at_least(self, ("max_shift", "doc_stride"), 0)
        if self.block_size is not None:
            at_least(self, ("block_size",), 1)
        if self.valid_fraction is not None:
            in_range("valid_fraction", self.valid_fraction, 0.0, 1.0)
        if self.corpora is not None:
            require("corpora", len(self.corpora) > 0, "list at least one corpus (or remove it)")

    def one_file(self, split: str, task: str) -> str | None:
        """``train``/``valid`` as the one file the ``task`` reads (a list: an error)."""
        value: str | list[str] | None = getattr(self, split)
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
    """Where the weights start (``attnkit train --init CKPT``; ``attnkit.training.warm_start``).

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
