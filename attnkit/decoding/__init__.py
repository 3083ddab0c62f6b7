"""Decoding on the stepping protocol: greedy search, beam search and sampling, and
speculative decoding (prompt lookup or a draft model) for decoder-only LMs.

The searches take any ``Stepper``; the inference plan (``attnkit.inference``)
decides the fast (static cache), compiled or reference path for a model and
the device's ``SearchSettings``, and ``build_stepper`` installs its choice.
"""

from attnkit.decoding.beam import beam_search
from attnkit.decoding.common import (
    DecodeResult,
    Hypothesis,
    SearchSettings,
    length_penalty,
    output_limits,
)
from attnkit.decoding.constraints import MinLength
from attnkit.decoding.draft import ModelDrafter
from attnkit.decoding.generate import generate, stream
from attnkit.decoding.greedy import greedy_search
from attnkit.decoding.lookup import LookupStats, NgramDrafter, lookup_stream
from attnkit.decoding.protocol import CausalStepper, DecodingState, Draft, Drafter, Stepper
from attnkit.decoding.sampling import filter_logits, sample
from attnkit.decoding.speculative import Sampling, SpeculativeStats, speculative_stream
from attnkit.decoding.static import StaticCacheStepper, SupportsStaticCache, build_stepper

__all__ = [
    "CausalStepper",
    "DecodeResult",
    "DecodingState",
    "Draft",
    "Drafter",
    "Hypothesis",
    "LookupStats",
    "ModelDrafter",
    "NgramDrafter",
    "Sampling",
    "SpeculativeStats",
    "SearchSettings",
    "MinLength",
    "StaticCacheStepper",
    "Stepper",
    "SupportsStaticCache",
    "beam_search",
    "build_stepper",
    "filter_logits",
    "generate",
    "greedy_search",
    "length_penalty",
    "lookup_stream",
    "output_limits",
    "sample",
    "speculative_stream",
    "stream",
]
