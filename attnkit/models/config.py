"""``TransformerConfig``: the one typed, validated config of the encoder-decoder family.

Variants are strings (``norm_position="pre"``, ``positions="learned"``), so a
config is plain data: it round-trips through JSON and travels inside every
checkpoint. Bad values raise ``ConfigError`` (a ``ValueError``) naming the field.
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

SHARE_EMBEDDINGS = ("none", "decoder", "all")
# Score functions that fit multi-head attention (attnkit.attention.scores.KEY_SCORES).
ATTENTION_SCORES = ("scaled_dot", "dot", "general", "additive")
_FIELD_TYPES = {"int": int, "float": float, "str": str}


@dataclass(frozen=True)
class TransformerConfig(ModelConfig):
    """The encoder-decoder Transformer. Defaults are the paper's base model (Table 3)."""

    family: ClassVar[str] = "transformer"

    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation: str = "relu"
    norm_position: str = "post"
    positions: str = "sinusoidal"
    max_relative_position: int = 16  # k of Shaw et al.; used by the "relative" variants
    attention_score: str = "scaled_dot"  # every attention sublayer's score function
    max_len: int = 1024
    src_vocab_size: int = 37000
    tgt_vocab_size: int = 37000
    share_embeddings: str = "all"
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self) -> None:
        for f in fields(self):
            # `from __future__ import annotations` makes f.type the string "int" etc.
            check_type(f.name, getattr(self, f.name), _FIELD_TYPES[f.type])
        for name in (
            "d_model",
            "num_heads",
            "d_ff",
            "num_encoder_layers",
            "num_decoder_layers",
            "max_len",
            "max_relative_position",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.num_heads != 0:
            raise ConfigError(
                f"d_model: {self.d_model} is not divisible by num_heads={self.num_heads}"
            )
        if self.absolute_positions == "sinusoidal" and self.d_model % 2 != 0:
            raise ConfigError(
                f"d_model: sinusoidal positions need an even d_model, got {self.d_model}"
            )
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name}: must be in [0, 1), got {getattr(self, name)}")
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("norm_position", self.norm_position, NORM_POSITIONS)
        check_choice("positions", self.positions, POSITIONS)
        check_choice("share_embeddings", self.share_embeddings, SHARE_EMBEDDINGS)
        check_choice("attention_score", self.attention_score, ATTENTION_SCORES)
        if self.relative_positions and self.attention_score not in ("scaled_dot", "dot"):
            raise ConfigError(
                f"attention_score: relative positions need a dot-product score, "
                f"got {self.attention_score!r}"
            )
        check_special_ids(
            {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id},
            {"src_vocab_size": self.src_vocab_size, "tgt_vocab_size": self.tgt_vocab_size},
        )
        if self.share_embeddings == "all" and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                "share_embeddings: 'all' needs one shared vocabulary, but "
                f"src_vocab_size={self.src_vocab_size} != tgt_vocab_size={self.tgt_vocab_size}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def absolute_positions(self) -> str:
        """``"sinusoidal"``, ``"learned"`` or ``"none"`` (relative only)."""
        absolute = self.positions.removesuffix("relative").removesuffix("+")
        return absolute or "none"

    @property
    def relative_positions(self) -> bool:
        """Whether self-attention has Shaw-style relative position terms."""
        return self.positions.endswith("relative")

    # -- presets (serialisation: ModelConfig) -------------------------------------

    @classmethod
    def preset_table(cls) -> dict[str, dict[str, Any]]:
        """``"base"``, ``"big"`` (the paper's Table 3) or ``"small"`` (CPU-sized)."""
        from attnkit.models.presets import TRANSFORMER_PRESETS

        return TRANSFORMER_PRESETS
