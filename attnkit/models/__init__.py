"""Models and their configs."""

from attnkit.models.config import TransformerConfig
from attnkit.models.decoder_only import CausalLMOutput, DecoderOnlyLM, DecoderOnlyState
from attnkit.models.encoder_decoder import EncoderDecoder, EncoderDecoderState
from attnkit.models.encoder_only import EncoderOnlyModel, EncoderOnlyOutput
from attnkit.models.lm_config import DecoderOnlyConfig, EncoderOnlyConfig
from attnkit.models.outputs import Seq2SeqOutput

__all__ = [
    "CausalLMOutput",
    "DecoderOnlyConfig",
    "DecoderOnlyLM",
    "DecoderOnlyState",
    "EncoderDecoder",
    "EncoderDecoderState",
    "EncoderOnlyConfig",
    "EncoderOnlyModel",
    "EncoderOnlyOutput",
    "Seq2SeqOutput",
    "TransformerConfig",
]
