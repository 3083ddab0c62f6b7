"""Decoding on the stepping protocol: greedy search, beam search and sampling.

The searches take any ``Stepper``; ``stepper_for(model, path)`` picks the fast
(static cache), compiled or reference path for a model.
"""

from attnkit.decoding.beam import beam_search
from attnkit.decoding.common import DecodeResult, Hypothesis, length_penalty, output_limits
from attnkit.decoding.constraints import MinLength
from attnkit.decoding.generate import generate, stream
from attnkit.decoding.greedy import greedy_search
from attnkit.decoding.protocol import CausalStepper, DecodingState, Stepper
from attnkit.decoding.sampling import filter_logits, sample
from attnkit.decoding.static import (
    DECODE_PATHS,
    StaticCacheStepper,
    SupportsStaticCache,
    stepper_for,
)

__all__ = [
    "DECODE_PATHS",
    "CausalStepper",
    "DecodeResult",
    "DecodingState",
    "Hypothesis",
    "MinLength",
    "StaticCacheStepper",
    "Stepper",
    "SupportsStaticCache",
    "beam_search",
    "filter_logits",
    "generate",
    "greedy_search",
    "length_penalty",
    "output_limits",
    "sample",
    "stepper_for",
    "stream",
]
