"""Attention: one function (``attend``), multi-head attention, masks and the KV cache."""

from attnkit.attention.cache import KVCache
from attnkit.attention.functional import attend
from attnkit.attention.masks import causal_mask, causal_padding_mask, padding_mask
from attnkit.attention.multihead import MultiHeadAttention

__all__ = [
    "KVCache",
    "MultiHeadAttention",
    "attend",
    "causal_mask",
    "causal_padding_mask",
    "padding_mask",
]
