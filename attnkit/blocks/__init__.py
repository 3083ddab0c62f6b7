"""Building blocks: residual wrapper, position-wise FFN, layers and stacks."""

from attnkit.blocks.decoder_layer import DecoderLayer
from attnkit.blocks.encoder_layer import EncoderLayer
from attnkit.blocks.feedforward import FeedForward
from attnkit.blocks.residual import Residual
from attnkit.blocks.stacks import Decoder, Encoder

__all__ = ["Decoder", "DecoderLayer", "Encoder", "EncoderLayer", "FeedForward", "Residual"]
