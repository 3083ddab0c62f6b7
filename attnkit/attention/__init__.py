"""Attention: one function (``attend``), score functions, multi-head attention, masks, cache."""

from attnkit.attention.backends import REFERENCE, AttentionBackend, Reference, use_backend
from attnkit.attention.cache import DecoderCache, KVCache, LayerCache
from attnkit.attention.cross import CrossAttention
from attnkit.attention.functional import attend
from attnkit.attention.masks import (
    PreparedMask,
    causal_mask,
    causal_padding_mask,
    padding_mask,
    prepare_mask,
)
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
    "REFERENCE",
    "SCORES",
    "AdditiveScore",
    "AttentionBackend",
    "CrossAttention",
    "DecoderCache",
    "DotScore",
    "GeneralScore",
    "KVCache",
    "LayerCache",
    "LocationScore",
    "MultiHeadAttention",
    "PreparedMask",
    "Reference",
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
    "prepare_mask",
    "scaled_dot_score",
    "use_backend",
]
