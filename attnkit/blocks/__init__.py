"""Building blocks: residual wrapper, position-wise FFN, layers and stacks."""

from attnkit.blocks.decoder_layer import CausalLayer, DecoderLayer
from attnkit.blocks.encoder_layer import EncoderLayer
from attnkit.blocks.feedforward import FeedForward
from attnkit.blocks.residual import Residual
from attnkit.blocks.stacks import Decoder, Encoder, StackOutput, run_causal_layers

__all__ = [
    "CausalLayer",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "Residual",
    "StackOutput",
    "run_causal_layers",
]
