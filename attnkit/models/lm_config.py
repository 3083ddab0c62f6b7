"""Configs of the two single-stack families: decoder-only (GPT) and encoder-only (BERT).

Like ``TransformerConfig``, each is one frozen, validated dataclass whose
variants are strings, so it round-trips through JSON inside every checkpoint.
Bad values raise ``ConfigError`` whose message starts with the field name;
``from_dict`` names an unknown key and suggests the closest known one.

Presets are data (``DECODER_ONLY_PRESETS``, ``ENCODER_ONLY_PRESETS``): a name
-> field overrides, applied with ``from_preset(name, **overrides)``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from attnkit.errors import ConfigError
from attnkit.models.config_base import (
    ACTIVATIONS,
    NORM_POSITIONS,
    POSITIONS,
    ModelConfig,
    check_choice,
    check_special_ids,
    check_type,
)

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


class _StackConfig(ModelConfig):
    """Validation and (de)serialisation shared by both single-stack configs."""

    family: ClassVar[str]
    presets: ClassVar[dict[str, dict[str, Any]]]
    _special_names: ClassVar[tuple[str, ...]] = ("pad_id", "bos_id", "eos_id")

    def _validate_common(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            # `from __future__ import annotations` makes f.type the string "int" etc.
            check_type(f.name, getattr(self, f.name), _FIELD_TYPES[f.type])
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
        check_choice("activation", self.activation, ACTIVATIONS)  # type: ignore[attr-defined]
        check_choice("norm_position", self.norm_position, NORM_POSITIONS)  # type: ignore[attr-defined]
        check_choice("positions", self.positions, POSITIONS)  # type: ignore[attr-defined]
        check_special_ids(
            {name: getattr(self, name) for name in self._special_names},
            {"vocab_size": self.vocab_size},  # type: ignore[attr-defined]
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
    def preset_table(cls) -> dict[str, dict[str, Any]]:
        return cls.presets


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
        check_choice("pooling", self.pooling, POOLINGS)
