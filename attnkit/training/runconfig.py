"""The run configuration of ``attnkit train``: YAML sections as typed dataclasses.

A run file has the sections ``task``, ``data``, ``tokenizer``, ``model``,
``train`` and ``decode``. Every key is checked: an unknown key names the
nearest valid one, a wrong type or out-of-range value names the field
(``train.max_tokens: must be >= 1, got 0``). ``--set train.max_steps=100``
overrides any key from the command line.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from attnkit.errors import ConfigError

# translation: an encoder-decoder on parallel text; lm: a decoder-only (GPT-style)
# causal LM on one text file; mlm: an encoder-only (BERT-style) masked LM on one.
TASKS = ("translation", "lm", "mlm")


def _type_ok(value: Any, annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    return True


def section_from_dict(cls: type, data: Any, prefix: str) -> Any:
    """Build dataclass ``cls`` from ``data``, naming ``prefix.key`` in every error."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in fields(cls)]
    for key, value in data.items():
        if key not in known:
            hint = difflib.get_close_matches(str(key), known, n=1)
            suggestion = f"; did you mean '{prefix}.{hint[0]}'?" if hint else ""
            raise ConfigError(f"{prefix}.{key}: unknown key{suggestion}")
        if not _type_ok(value, hints[key]):
            expected = getattr(hints[key], "__name__", str(hints[key]))
            raise ConfigError(
                f"{prefix}.{key}: expected {expected}, got {type(value).__name__} {value!r}"
            )
    try:
        return cls(**data)
    except ConfigError as e:
        raise ConfigError(f"{prefix}.{e}") from None


def _require(name: str, ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(f"{name}: {message}")


@dataclass
class DataConfig:
    """Where the text is.

    Translation reads parallel text: ``{dir}/{split}.{lang}`` files, or
    ``{dir}/{split}`` if it ends in .tsv. The ``lm`` and ``mlm`` tasks read one
    UTF-8 file, ``{dir}/{text}``, and hold out its last ``valid_fraction``.
    """

    dir: str = "."
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    train: str = "train"
    valid: str | None = "valid"
    test: str | None = None
    max_len: int = 256  # tokens; longer training pairs are dropped (and counted)
    skip_empty: bool = False
    text: str | None = None  # lm/mlm: the text file
    valid_fraction: float = 0.1  # lm/mlm: the held-out tail of the text

    def __post_init__(self) -> None:
        _require("max_len", self.max_len >= 1, f"must be >= 1, got {self.max_len}")
        _require(
            "valid_fraction",
            0.0 <= self.valid_fraction < 1.0,
            f"must be in [0, 1), got {self.valid_fraction}",
        )

    def files(self, split: str) -> tuple[Path, ...]:
        """Paths of a split: one TSV file, or a source and a target file."""
        base = Path(self.dir)
        if split.endswith(".tsv"):
            return (base / split,)
        return (base / f"{split}.{self.src_lang}", base / f"{split}.{self.tgt_lang}")


@dataclass
class TokenizerConfig:
    kind: str = "bpe"  # bpe | char
    vocab_size: int = 8000  # BPE only

    def __post_init__(self) -> None:
        _require("kind", self.kind in ("bpe", "char"), f"expected bpe or char, got {self.kind!r}")
        _require("vocab_size", self.vocab_size >= 8, f"must be >= 8, got {self.vocab_size}")


@dataclass
class TrainConfig:
    """The paper's recipe by default: Adam(0.9, 0.98, 1e-9), warmup schedule, eps_ls 0.1."""

    max_steps: int = 100_000
    max_minutes: float | None = None  # stop (and checkpoint) after this wall time
    max_tokens: int = 4096  # padded tokens per batch and rank (source or target, the longer)
    grad_accum: int = 1
    schedule: str = "noam"  # noam | cosine | constant
    lr: float = 1.0  # noam: the factor in front of d_model^-0.5 * min(...); else the peak lr
    warmup_steps: int = 4000
    min_lr: float = 0.0
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 0.0  # 0 = no clipping
    precision: str = "auto"  # auto | fp32 | bf16 | fp16 (auto: bf16 on CUDA, fp32 on CPU)
    seed: int = 1
    log_every: int = 50
    eval_every: int = 1000
    save_every: int = 1000
    keep_last: int = 5
    valid_bleu_sentences: int = 500  # 0 = no BLEU during training
    compile: bool = False  # always compile the training forward (see also fast)
    # auto | on | off: compiled forward, chunked loss, fused Adam (auto: on for CUDA);
    # attnkit/training/fast.py says what each does. `--no-fast` sets off.
    # YAML reads a bare on/off as true/false; both spellings are accepted.
    fast: str | bool = "auto"
    # Updates skipped in a row for a non-finite loss or gradient norm before training
    # stops with an error (fp16 overflows, which the loss scaler handles, do not count).
    max_nonfinite: int = 10
    distributed: str = "ddp"  # under torchrun: ddp | fsdp (FSDP2, sharded); see docs/distributed.md

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_tokens", "grad_accum", "log_every", "eval_every"):
            _require(name, getattr(self, name) >= 1, f"must be >= 1, got {getattr(self, name)}")
        for name in (
            "save_every",
            "keep_last",
            "warmup_steps",
            "valid_bleu_sentences",
            "max_nonfinite",
        ):
            _require(name, getattr(self, name) >= 0, f"must be >= 0, got {getattr(self, name)}")
        _require(
            "schedule",
            self.schedule in ("noam", "cosine", "constant"),
            f"expected noam, cosine or constant, got {self.schedule!r}",
        )
        _require("lr", self.lr > 0, f"must be > 0, got {self.lr}")
        _require(
            "label_smoothing",
            0.0 <= self.label_smoothing < 1.0,
            f"must be in [0, 1), got {self.label_smoothing}",
        )
        _require("clip_norm", self.clip_norm >= 0, f"must be >= 0, got {self.clip_norm}")
        _require(
            "precision",
            self.precision in ("auto", "fp32", "bf16", "fp16"),
            f"expected auto, fp32, bf16 or fp16, got {self.precision!r}",
        )
        if self.max_minutes is not None:
            _require("max_minutes", self.max_minutes > 0, f"must be > 0, got {self.max_minutes}")
        if isinstance(self.fast, bool):
            self.fast = "on" if self.fast else "off"
        _require(
            "fast",
            self.fast in ("auto", "on", "off"),
            f"expected auto, on or off, got {self.fast!r}",
        )
        _require(
            "distributed",
            self.distributed in ("ddp", "fsdp"),
            f"expected ddp or fsdp, got {self.distributed!r}",
        )


@dataclass
class DecodeConfig:
    beam: int = 4
    alpha: float = 0.6
    max_len_b: int = 50  # output length limit = source length + max_len_b
    bleu_tokenize: str = "13a"  # sacreBLEU tokenizer for validation BLEU ("char" for compounds)

    def __post_init__(self) -> None:
        _require("beam", self.beam >= 1, f"must be >= 1, got {self.beam}")
        _require("alpha", self.alpha >= 0, f"must be >= 0, got {self.alpha}")
        _require("max_len_b", self.max_len_b >= 1, f"must be >= 1, got {self.max_len_b}")


@dataclass
class RunConfig:
    task: str = "translation"
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: dict[str, Any] = field(default_factory=lambda: {"preset": "small"})
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    @classmethod
    def from_dict(cls, data: Any) -> RunConfig:
        if not isinstance(data, dict):
            raise ConfigError("config: expected a mapping at the top level")
        sections = {
            "data": DataConfig,
            "tokenizer": TokenizerConfig,
            "train": TrainConfig,
            "decode": DecodeConfig,
        }
        known = ["task", "model", *sections]
        for key in data:
            if key not in known:
                hint = difflib.get_close_matches(str(key), known, n=1)
                suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
                raise ConfigError(f"{key}: unknown section{suggestion}")
        task = data.get("task", "translation")
        if task not in TASKS:
            raise ConfigError(f"task: expected one of {', '.join(TASKS)}, got {task!r}")
        model = data.get("model") or {"preset": "small"}
        if not isinstance(model, dict):
            raise ConfigError("model: expected a mapping")
        built = {k: section_from_dict(c, data.get(k), k) for k, c in sections.items()}
        return cls(task=task, model=dict(model), **built)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"train.max_steps=100"`` -> ``(["train", "max_steps"], 100)`` (value parsed as YAML)."""
    import yaml

    if "=" not in text:
        raise ConfigError(f"--set {text}: expected key=value, e.g. train.max_steps=1000")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
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

    data: Any = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{p}: config file not found")
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
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
