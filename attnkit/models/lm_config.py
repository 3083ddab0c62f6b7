"""Configs of the two single-stack families: decoder-only (GPT) and encoder-only (BERT).

Like ``TransformerConfig``, each is one frozen, validated dataclass whose
variants are strings, so it round-trips through JSON inside every checkpoint.
Bad values raise ``ConfigError`` whose message starts with the field name;
``from_dict`` names an unknown key and suggests the closest known one.

Presets are data (``DECODER_ONLY_PRESETS``, ``ENCODER_ONLY_PRESETS``): a name
-> field overrides, applied with ``from_preset(name, **overrides)``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self

from attnkit.errors import ConfigError

ACTIVATIONS = ("relu", "gelu")
NORM_POSITIONS = ("post", "pre")
# "relative" is Shaw et al. (2018) alone; "<absolute>+relative" adds both.
POSITIONS = ("sinusoidal", "learned", "relative", "sinusoidal+relative", "learned+relative")
POOLINGS = ("first", "mean")
_FIELD_TYPES = {"int": int, "float": float, "str": str, "bool": bool}

# nanoGPT's config/train_shakespeare_char.py and GPT-2 small (124M). The
# vocabulary is left to the tokenizer: pass vocab_size=tokenizer.vocab_size.
DECODER_ONLY_PRESETS: dict[str, dict[str, Any]] = {
    "small": {"d_model": 128, "num_heads": 4, "d_ff": 512, "num_layers": 4, "max_len": 256},
    "shakespeare_char": {
        "d_model": 384,
        "num_heads": 6,
        "d_ff": 1536,
        "num_layers": 6,
        "max_len": 256,
        "dropout": 0.2,
    },
    "gpt2_small": {
        "d_model": 768,
        "num_heads": 12,
        "d_ff": 3072,
        "num_layers": 12,
        "max_len": 1024,
        "vocab_size": 50257,
    },
}

# BERT-base's shape (Devlin et al., 2019); "small" is CPU-sized.
ENCODER_ONLY_PRESETS: dict[str, dict[str, Any]] = {
    "small": {"d_model": 128, "num_heads": 4, "d_ff": 512, "num_layers": 4, "max_len": 256},
    "bert_base": {"d_model": 768, "num_heads": 12, "d_ff": 3072, "num_layers": 12},
}


def _check_type(name: str, value: Any, kind: type) -> None:
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind is bool:
        ok = isinstance(value, bool)
    else:  # bool is an int subclass; `d_model: true` is a mistake
        ok = isinstance(value, kind) and not isinstance(value, bool)
    if not ok:
        raise ConfigError(f"{name}: expected {kind.__name__}, got {type(value).__name__} {value!r}")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name}: expected one of {', '.join(choices)}; got {value!r}")


class _StackConfig:
    """Validation and (de)serialisation shared by both single-stack configs."""

    family: ClassVar[str]
    presets: ClassVar[dict[str, dict[str, Any]]]
    _special_names: ClassVar[tuple[str, ...]] = ("pad_id", "bos_id", "eos_id")

    def _validate_common(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            # `from __future__ import annotations` makes f.type the string "int" etc.
            _check_type(f.name, getattr(self, f.name), _FIELD_TYPES[f.type])
        sizes = ("d_model", "num_heads", "d_ff", "num_layers", "max_len", "max_relative_position")
        for name in sizes:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        d_model, num_heads = self.d_model, self.num_heads  # type: ignore[attr-defined]
        if d_model % num_heads != 0:
            raise ConfigError(f"d_model: {d_model} is not divisible by num_heads={num_heads}")
        if self.absolute_positions == "sinusoidal" and d_model % 2 != 0:
            raise ConfigError(f"d_model: sinusoidal positions need an even d_model, got {d_model}")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name}: must be in [0, 1), got {getattr(self, name)}")
        _check_choice("activation", self.activation, ACTIVATIONS)  # type: ignore[attr-defined]
        _check_choice("norm_position", self.norm_position, NORM_POSITIONS)  # type: ignore[attr-defined]
        _check_choice("positions", self.positions, POSITIONS)  # type: ignore[attr-defined]
        specials = {name: getattr(self, name) for name in self._special_names}
        for name, value in specials.items():
            if value < 0:
                raise ConfigError(f"{name}: must be >= 0, got {value}")
        if len(set(specials.values())) != len(specials):
            names = ", ".join(specials)
            raise ConfigError(f"{self._special_names[0]}: {names} must differ, got {specials}")
        vocab_size = self.vocab_size  # type: ignore[attr-defined]
        needed = max(specials.values()) + 1
        if vocab_size < needed:
            raise ConfigError(
                f"vocab_size: {vocab_size} is too small for the special tokens "
                f"(ids up to {needed - 1}); it must be >= {needed}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads  # type: ignore[attr-defined]

    @property
    def absolute_positions(self) -> str:
        """``"sinusoidal"``, ``"learned"`` or ``"none"`` (relative only)."""
        absolute = self.positions.removesuffix("relative").removesuffix("+")  # type: ignore[attr-defined]
        return absolute or "none"

    @property
    def relative_positions(self) -> bool:
        """Whether self-attention has Shaw-style relative position terms."""
        return self.positions.endswith("relative")  # type: ignore[attr-defined]

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> Self:
        if name not in cls.presets:
            raise ConfigError(
                f"preset: unknown preset {name!r}; choose from {', '.join(cls.presets)}"
            )
        return cls.from_dict({**cls.presets[name], **overrides})

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, **dataclasses.asdict(self)}  # type: ignore[call-overload]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        data = dict(data)
        family = data.pop("family", cls.family)
        if family != cls.family:
            raise ConfigError(f"family: this is a {family!r} config, not a {cls.family!r} one")
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        for key in data:
            if key not in known:
                hint = difflib.get_close_matches(key, known, n=1)
                did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ""
                raise ConfigError(f"{key}: unknown field{did_you_mean}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> Self:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"config: invalid JSON ({e})") from None
        if not isinstance(data, dict):
            raise ConfigError("config: expected a JSON object")
        return cls.from_dict(data)


@dataclass(frozen=True)
class DecoderOnlyConfig(_StackConfig):
    """A GPT-style causal language model.

    ``max_len`` is the context length (nanoGPT's ``block_size``). Defaults are
    GPT-like (pre-LN, GELU, learned positions, tied output projection).
    """

    family: ClassVar[str] = "decoder_only"
    presets: ClassVar[dict[str, dict[str, Any]]] = DECODER_ONLY_PRESETS

    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    num_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation: str = "gelu"
    norm_position: str = "pre"
    positions: str = "learned"
    max_relative_position: int = 16  # k of Shaw et al.; used by the "relative" variants
    max_len: int = 1024
    vocab_size: int = 8000
    tie_embeddings: bool = True
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self) -> None:
        self._validate_common()


@dataclass(frozen=True)
class EncoderOnlyConfig(_StackConfig):
    """A BERT-style bidirectional encoder with an MLM head and a classification head.

    attnkit tokenizers reserve ids 0-3 (pad, BOS, EOS, unk) and have no mask
    token: give the model one more id, ``vocab_size = tokenizer.vocab_size + 1``
    and ``mask_id = tokenizer.vocab_size`` (see ``attnkit.data.mlm.mlm_vocab``).
    ``num_labels = 0`` builds no classification head; ``pooling`` picks the
    sequence summary it reads (``"first"`` token, as BERT's [CLS], or the
    ``"mean"`` over real tokens).
    """

    family: ClassVar[str] = "encoder_only"
    presets: ClassVar[dict[str, dict[str, Any]]] = ENCODER_ONLY_PRESETS
    _special_names: ClassVar[tuple[str, ...]] = ("pad_id", "bos_id", "eos_id", "mask_id")

    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    num_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation: str = "gelu"
    norm_position: str = "post"
    positions: str = "learned"
    max_relative_position: int = 16  # k of Shaw et al.; used by the "relative" variants
    max_len: int = 512
    vocab_size: int = 8001
    num_labels: int = 2
    pooling: str = "first"
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    mask_id: int = 8000

    def __post_init__(self) -> None:
        self._validate_common()
        if self.num_labels < 0:
            raise ConfigError(f"num_labels: must be >= 0 (0: no classifier), got {self.num_labels}")
        _check_choice("pooling", self.pooling, POOLINGS)
