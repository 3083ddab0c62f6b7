"""Decoding on the stepping protocol: greedy search, beam search and sampling."""

from attnkit.decoding.beam import beam_search
from attnkit.decoding.common import DecodeResult, Hypothesis, length_penalty, output_limits
from attnkit.decoding.generate import generate, stream
from attnkit.decoding.greedy import greedy_search
from attnkit.decoding.protocol import DecodingState, Stepper, start_decoding
from attnkit.decoding.sampling import filter_logits, sample

__all__ = [
    "DecodeResult",
    "DecodingState",
    "Hypothesis",
    "Stepper",
    "beam_search",
    "filter_logits",
    "generate",
    "greedy_search",
    "length_penalty",
    "output_limits",
    "sample",
    "start_decoding",
    "stream",
]
