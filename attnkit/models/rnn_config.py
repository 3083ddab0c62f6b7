"""``RNNSeq2SeqConfig``: the one typed, validated config of the RNN encoder-decoder family.

The models attention grew out of: Cho et al. (2014) / Sutskever et al. (2014)
without attention, Bahdanau et al. (2015) and Luong et al. (2015) with it.
Variants are strings (``cell="lstm"``, ``attention="luong_general"``), so a
config is plain data that round-trips through JSON inside every checkpoint.
Bad values raise ``ConfigError`` whose message starts with the field name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from attnkit.models.config_base import ModelConfig, check_special_ids
from attnkit.models.presets import RNN_PRESETS
from attnkit.validation import at_least, check_fields, in_range, require

Cell = Literal["lstm", "gru"]
RNNAttention = Literal["none", "bahdanau", "luong_general", "luong_dot", "luong_location"]


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
    presets: ClassVar[dict[str, dict[str, object]]] = RNN_PRESETS

    cell: Cell = "gru"
    attention: RNNAttention = "bahdanau"
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
        check_fields(self)
        at_least(self, ("embed_dim", "hidden_size", "num_layers", "max_src_len", "max_len"), 1)
        in_range("dropout", self.dropout, 0.0, 1.0)
        require(
            "input_feeding",
            not self.input_feeding or self.is_luong,
            "only Luong attention feeds its attentional vector back; "
            f"got attention={self.attention!r}",
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
