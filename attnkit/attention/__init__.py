"""Attention: one function (``attend``), score functions, multi-head attention, masks, cache."""

from attnkit.attention.cache import DecoderCache, KVCache, LayerCache
from attnkit.attention.functional import attend
from attnkit.attention.masks import causal_mask, causal_padding_mask, padding_mask
from attnkit.attention.multihead import MultiHeadAttention
from attnkit.attention.scores import (
    KEY_SCORES,
    SCORES,
    AdditiveScore,
    DotScore,
    GeneralScore,
    LocationScore,
    ScaledDotScore,
    Score,
    build_score,
    dot_score,
    scaled_dot_score,
)
from attnkit.attention.static_cache import StaticBufferPool, StaticKVCache

__all__ = [
    "KEY_SCORES",
    "SCORES",
    "AdditiveScore",
    "DecoderCache",
    "DotScore",
    "GeneralScore",
    "KVCache",
    "LayerCache",
    "LocationScore",
    "MultiHeadAttention",
    "ScaledDotScore",
    "Score",
    "StaticBufferPool",
    "StaticKVCache",
    "attend",
    "build_score",
    "causal_mask",
    "causal_padding_mask",
    "dot_score",
    "padding_mask",
    "scaled_dot_score",
]
