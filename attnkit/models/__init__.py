"""Models and their configs."""

from attnkit.models.config import TransformerConfig
from attnkit.models.decoder_only import CausalLMOutput, DecoderOnlyLM, DecoderOnlyState
from attnkit.models.encoder_decoder import EncoderDecoder, EncoderDecoderState
from attnkit.models.encoder_only import EncoderOnlyModel, EncoderOnlyOutput
from attnkit.models.lm_config import DecoderOnlyConfig, EncoderOnlyConfig
from attnkit.models.outputs import Seq2SeqOutput
from attnkit.models.registry import (
    SEQ2SEQ_FAMILIES,
    Seq2SeqConfig,
    build_model,
    config_from_dict,
    config_from_preset,
)
from attnkit.models.rnn_config import RNNSeq2SeqConfig
from attnkit.models.rnn_seq2seq import RNNSeq2Seq, RNNSeq2SeqState

__all__ = [
    "SEQ2SEQ_FAMILIES",
    "CausalLMOutput",
    "DecoderOnlyConfig",
    "DecoderOnlyLM",
    "DecoderOnlyState",
    "EncoderDecoder",
    "EncoderDecoderState",
    "EncoderOnlyConfig",
    "EncoderOnlyModel",
    "EncoderOnlyOutput",
    "RNNSeq2Seq",
    "RNNSeq2SeqConfig",
    "RNNSeq2SeqState",
    "Seq2SeqConfig",
    "Seq2SeqOutput",
    "TransformerConfig",
    "build_model",
    "config_from_dict",
    "config_from_preset",
]
