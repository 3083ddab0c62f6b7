"""``RNNSeq2SeqConfig``: the one typed, validated config of the RNN encoder-decoder family.

The models attention grew out of: Cho et al. (2014) / Sutskever et al. (2014)
without attention, Bahdanau et al. (2015) and Luong et al. (2015) with it.
Variants are strings (``cell="lstm"``, ``attention="luong_general"``), so a
config is plain data that round-trips through JSON inside every checkpoint.
Bad values raise ``ConfigError`` whose message starts with the field name.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from attnkit.errors import ConfigError
from attnkit.models.config_base import (
    ModelConfig,
    check_choice,
    check_special_ids,
    check_type,
)

CELLS = ("lstm", "gru")
RNN_ATTENTIONS = ("none", "bahdanau", "luong_general", "luong_dot", "luong_location")
_FIELD_TYPES = {"int": int, "float": float, "str": str, "bool": bool}

RNN_PRESETS: dict[str, dict[str, Any]] = {
    # CPU-sized: tests, quick experiments, small corpora.
    "small": {
        "cell": "gru",
        "attention": "bahdanau",
        "embed_dim": 64,
        "hidden_size": 128,
        "num_layers": 1,
        "bidirectional": True,
        "dropout": 0.1,
    },
    # RNNsearch's shape (Bahdanau et al., 2015), halved: biGRU encoder, additive attention.
    "bahdanau": {
        "cell": "gru",
        "attention": "bahdanau",
        "embed_dim": 256,
        "hidden_size": 512,
        "num_layers": 1,
        "bidirectional": True,
        "dropout": 0.1,
    },
    # Luong et al. (2015)'s global attention with input feeding, at CPU/GPU-friendly width.
    "luong": {
        "cell": "lstm",
        "attention": "luong_general",
        "embed_dim": 512,
        "hidden_size": 512,
        "num_layers": 2,
        "bidirectional": False,
        "input_feeding": True,
        "dropout": 0.2,
    },
}


@dataclass(frozen=True)
class RNNSeq2SeqConfig(ModelConfig):
    """An RNN encoder-decoder. Defaults are the ``bahdanau`` preset.

    ``attention``: ``"none"`` (the encoder's final state is a fixed context
    fed at every step), ``"bahdanau"`` (additive, from the previous decoder
    state) or ``"luong_general" | "luong_dot" | "luong_location"`` (from the
    current state, with an attentional layer; ``input_feeding`` feeds it back).
    ``max_src_len`` bounds the source for ``luong_location`` only; ``max_len``
    bounds what decoding generates (as in ``TransformerConfig``).
    """

    family: ClassVar[str] = "rnn"

    cell: str = "gru"
    attention: str = "bahdanau"
    embed_dim: int = 256
    hidden_size: int = 512
    num_layers: int = 1
    bidirectional: bool = True
    dropout: float = 0.1
    input_feeding: bool = False
    max_src_len: int = 256
    max_len: int = 256
    src_vocab_size: int = 8000
    tgt_vocab_size: int = 8000
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self) -> None:
        for f in fields(self):
            # `from __future__ import annotations` makes f.type the string "int" etc.
            check_type(f.name, getattr(self, f.name), _FIELD_TYPES[f.type])
        for name in ("embed_dim", "hidden_size", "num_layers", "max_src_len", "max_len"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout: must be in [0, 1), got {self.dropout}")
        check_choice("cell", self.cell, CELLS)
        check_choice("attention", self.attention, RNN_ATTENTIONS)
        if self.input_feeding and not self.is_luong:
            raise ConfigError(
                f"input_feeding: only Luong attention feeds its attentional vector back; "
                f"got attention={self.attention!r}"
            )
        check_special_ids(
            {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id},
            {"src_vocab_size": self.src_vocab_size, "tgt_vocab_size": self.tgt_vocab_size},
        )

    @property
    def is_luong(self) -> bool:
        return self.attention.startswith("luong_")

    @property
    def encoder_dim(self) -> int:
        """Width of the encoder's states: ``2 * hidden_size`` when bidirectional."""
        return self.hidden_size * (2 if self.bidirectional else 1)

    @property
    def d_model(self) -> int:
        """The decoder's width; what the noam schedule scales by (``d_model^-0.5``)."""
        return self.hidden_size

    # -- presets (serialisation: ModelConfig) -------------------------------------

    @classmethod
    def preset_table(cls) -> dict[str, dict[str, Any]]:
        """``"small"`` (CPU-sized), ``"bahdanau"`` or ``"luong"``."""
        return RNN_PRESETS
