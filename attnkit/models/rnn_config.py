"""``RNNSeq2SeqConfig``: the one typed, validated config of the RNN encoder-decoder family.

The models attention grew out of: Cho et al. (2014) / Sutskever et al. (2014)
without attention, Bahdanau et al. (2015) and Luong et al. (2015) with it.
Variants are strings (``cell="lstm"``, ``attention="luong_general"``), so a
config is plain data that round-trips through JSON inside every checkpoint.
Bad values raise ``ConfigError`` whose message starts with the field name.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from attnkit.errors import ConfigError
from attnkit.models.lm_config import _check_choice, _check_type

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
class RNNSeq2SeqConfig:
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
            _check_type(f.name, getattr(self, f.name), _FIELD_TYPES[f.type])
        for name in ("embed_dim", "hidden_size", "num_layers", "max_src_len", "max_len"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout: must be in [0, 1), got {self.dropout}")
        _check_choice("cell", self.cell, CELLS)
        _check_choice("attention", self.attention, RNN_ATTENTIONS)
        if self.input_feeding and not self.is_luong:
            raise ConfigError(
                f"input_feeding: only Luong attention feeds its attentional vector back; "
                f"got attention={self.attention!r}"
            )
        specials = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in specials.items():
            if value < 0:
                raise ConfigError(f"{name}: must be >= 0, got {value}")
        if len(set(specials.values())) != len(specials):
            raise ConfigError(f"pad_id: pad_id, bos_id and eos_id must differ, got {specials}")
        needed = max(specials.values()) + 1
        for name in ("src_vocab_size", "tgt_vocab_size"):
            if getattr(self, name) < needed:
                raise ConfigError(
                    f"{name}: {getattr(self, name)} is too small for the special tokens "
                    f"(ids up to {needed - 1}); it must be >= {needed}"
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

    # -- presets and serialisation -------------------------------------------------

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> RNNSeq2SeqConfig:
        """``"small"`` (CPU-sized), ``"bahdanau"`` or ``"luong"``, plus field overrides."""
        if name not in RNN_PRESETS:
            raise ConfigError(
                f"preset: unknown preset {name!r}; choose from {', '.join(RNN_PRESETS)}"
            )
        return cls.from_dict({**RNN_PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> RNNSeq2SeqConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, **dataclasses.asdict(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RNNSeq2SeqConfig:
        data = dict(data)
        family = data.pop("family", cls.family)
        if family != cls.family:
            raise ConfigError(f"family: this is a {family!r} config, not a {cls.family!r} one")
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                hint = difflib.get_close_matches(key, known, n=1)
                did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ""
                raise ConfigError(f"{key}: unknown field{did_you_mean}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> RNNSeq2SeqConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"config: invalid JSON ({e})") from None
        if not isinstance(data, dict):
            raise ConfigError("config: expected a JSON object")
        return cls.from_dict(data)
