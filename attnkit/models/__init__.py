"""Models, their configs, and the family registry."""

from attnkit.models.config import TransformerConfig
from attnkit.models.decoder_only import CausalLMOutput, DecoderOnlyLM
from attnkit.models.encoder_decoder import EncoderDecoder
from attnkit.models.encoder_only import EncoderOnlyModel, EncoderOnlyOutput
from attnkit.models.lm_config import DecoderOnlyConfig, EncoderOnlyConfig
from attnkit.models.outputs import Seq2SeqOutput
from attnkit.models.registry import (
    FAMILIES,
    AnyModelConfig,
    Family,
    ModelKind,
    Seq2SeqConfig,
    build_model,
    config_from_dict,
    config_from_preset,
    family_of,
    get_family,
)
from attnkit.models.rnn_config import RNNSeq2SeqConfig
from attnkit.models.rnn_seq2seq import RNNSeq2Seq, RNNSeq2SeqState
from attnkit.models.state import CacheLayout, DecoderState
from attnkit.models.vit import VisionTransformer, ViTConfig

__all__ = [
    "FAMILIES",
    "AnyModelConfig",
    "CacheLayout",
    "CausalLMOutput",
    "DecoderOnlyConfig",
    "DecoderOnlyLM",
    "DecoderState",
    "EncoderDecoder",
    "EncoderOnlyConfig",
    "EncoderOnlyModel",
    "EncoderOnlyOutput",
    "Family",
    "ModelKind",
    "RNNSeq2Seq",
    "RNNSeq2SeqConfig",
    "RNNSeq2SeqState",
    "Seq2SeqConfig",
    "Seq2SeqOutput",
    "TransformerConfig",
    "ViTConfig",
    "VisionTransformer",
    "build_model",
    "config_from_dict",
    "config_from_preset",
    "family_of",
    "get_family",
]
