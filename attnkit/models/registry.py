"""The one table of model families: ``family -> (config class, model class, kind)``.

Config loading, model building, checkpoint loading and the CLI's hints all
derive from ``FAMILIES``, a plain dict read at the edges (no import-time
registration). A config's ``to_dict()["family"]`` names its row; a dict
without one is a Transformer config, as every checkpoint written before the
other families was.

``kind`` says what a family does, and so which commands apply to it:
``"seq2seq"`` (translate), ``"causal_lm"`` (generate) or ``"masked_lm"``
(fill in masked tokens) or ``"image_classifier"``. ``vocab_field`` is the
config field that a tokenizer's vocabulary must fit into (``None``: no text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import nn

from attnkit.errors import ConfigError
from attnkit.models.config import TransformerConfig
from attnkit.models.config_base import ModelConfig
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.encoder_decoder import EncoderDecoder
from attnkit.models.encoder_only import EncoderOnlyModel
from attnkit.models.lm_config import DecoderOnlyConfig, EncoderOnlyConfig
from attnkit.models.rnn_config import RNNSeq2SeqConfig
from attnkit.models.rnn_seq2seq import RNNSeq2Seq
from attnkit.models.swin import SwinConfig, SwinTransformer
from attnkit.models.vit import VisionTransformer, ViTConfig

ModelKind = Literal["seq2seq", "causal_lm", "masked_lm", "image_classifier"]
KIND_NAMES: dict[str, str] = {
    "seq2seq": "translation model",
    "causal_lm": "causal language model",
    "masked_lm": "masked language model",
    "image_classifier": "image classifier",
}
AnyModelConfig = (
    TransformerConfig
    | RNNSeq2SeqConfig
    | DecoderOnlyConfig
    | EncoderOnlyConfig
    | ViTConfig
    | SwinConfig
)
Seq2SeqConfig = TransformerConfig | RNNSeq2SeqConfig


@dataclass(frozen=True)
class Family:
    """One row of the registry."""

    name: str
    config_class: type[ModelConfig]
    model_class: type[nn.Module]
    kind: ModelKind
    vocab_field: str | None  # None: the family reads no text (images)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("transformer", TransformerConfig, EncoderDecoder, "seq2seq", "tgt_vocab_size"),
        Family("rnn", RNNSeq2SeqConfig, RNNSeq2Seq, "seq2seq", "tgt_vocab_size"),
        Family("decoder_only", DecoderOnlyConfig, DecoderOnlyLM, "causal_lm", "vocab_size"),
        Family("encoder_only", EncoderOnlyConfig, EncoderOnlyModel, "masked_lm", "vocab_size"),
        Family("vit", ViTConfig, VisionTransformer, "image_classifier", None),
        Family("swin", SwinConfig, SwinTransformer, "image_classifier", None),
    )
}


def get_family(name: object) -> Family:
    """The registry row of ``name``; ``ConfigError`` naming the field otherwise."""
    if name not in FAMILIES:
        raise ConfigError(f"family: expected one of {', '.join(FAMILIES)}; got {name!r}")
    return FAMILIES[name]


def family_of(config: ModelConfig) -> Family:
    return get_family(config.family)


def config_from_dict(data: dict[str, object]) -> ModelConfig:
    """A config from its ``to_dict()`` form, dispatching on ``family`` (default transformer)."""
    return get_family(data.get("family", "transformer")).config_class.from_dict(data)


def config_from_preset(family: str, name: str, **overrides: object) -> ModelConfig:
    """``from_preset(name, **overrides)`` of the family's config class."""
    return get_family(family).config_class.from_preset(name, **overrides)


def build_model(config: ModelConfig) -> nn.Module:
    """The model for ``config`` (randomly initialised)."""
    row = family_of(config)
    if type(config) is not row.config_class:
        raise ConfigError(f"family: {type(config).__name__} is not the {row.name!r} config")
    return row.model_class(config)
