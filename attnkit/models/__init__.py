"""Models and their configs."""

from attnkit.models.config import TransformerConfig
from attnkit.models.encoder_decoder import EncoderDecoder, EncoderDecoderState
from attnkit.models.outputs import Seq2SeqOutput

__all__ = ["EncoderDecoder", "EncoderDecoderState", "Seq2SeqOutput", "TransformerConfig"]
