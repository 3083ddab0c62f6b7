"""Build a sequence-to-sequence model of either family from plain data.

Configs carry their family (``to_dict()["family"]``): ``"transformer"``
(``TransformerConfig`` -> ``EncoderDecoder``) or ``"rnn"``
(``RNNSeq2SeqConfig`` -> ``RNNSeq2Seq``). A dict without one is a
Transformer config, as every checkpoint written before the RNN family was.
The registry is a plain dict, read at the edges (training, checkpoints).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from attnkit.errors import ConfigError
from attnkit.models.config import TransformerConfig
from attnkit.models.encoder_decoder import EncoderDecoder
from attnkit.models.rnn_config import RNNSeq2SeqConfig
from attnkit.models.rnn_seq2seq import RNNSeq2Seq

Seq2SeqConfig = TransformerConfig | RNNSeq2SeqConfig

SEQ2SEQ_FAMILIES: dict[str, tuple[type[Seq2SeqConfig], type[nn.Module]]] = {
    "transformer": (TransformerConfig, EncoderDecoder),
    "rnn": (RNNSeq2SeqConfig, RNNSeq2Seq),
}


def config_class(family: Any) -> type[Seq2SeqConfig]:
    """The config class of ``family``; ``ConfigError`` naming the field otherwise."""
    if family not in SEQ2SEQ_FAMILIES:
        raise ConfigError(f"family: expected one of {', '.join(SEQ2SEQ_FAMILIES)}; got {family!r}")
    return SEQ2SEQ_FAMILIES[family][0]


def config_from_dict(data: dict[str, Any]) -> Seq2SeqConfig:
    """A config from its ``to_dict()`` form, dispatching on ``family`` (default transformer)."""
    return config_class(data.get("family", "transformer")).from_dict(data)


def config_from_preset(family: str, name: str, **overrides: Any) -> Seq2SeqConfig:
    """``from_preset(name, **overrides)`` of the family's config class."""
    return config_class(family).from_preset(name, **overrides)


def build_model(config: Seq2SeqConfig) -> nn.Module:
    """The model for ``config`` (randomly initialised)."""
    for config_cls, model_cls in SEQ2SEQ_FAMILIES.values():
        if type(config) is config_cls:
            return model_cls(config)
    raise ConfigError(f"family: no sequence-to-sequence model for {type(config).__name__}")
