"""Bounds on the native caches that grow with every new tensor shape a server sees.

``--precision fp32`` (the default) and ``bf16`` run the model's linears through
oneDNN with prepacked weights (``attnkit.quantize.linear``). oneDNN builds a
primitive per (rows, in, out) shape and keeps it in two caches, each of 1024
entries by default: its own primitive cache (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``)
and ideep's per-thread cache in torch (``LRU_CACHE_CAPACITY``). A server sees
a new row count with almost every request (sentences x beams, sentences x
source length), and a primitive for many rows holds megabytes, so RSS grew
by hundreds of MB over a few thousand varied requests (issue 21). A small
capacity keeps the shapes of the few requests in flight, which is what
repeats (every decoding step of a batch has the same shapes).

Both libraries read their capacity once, when their cache is first used, so
``bound_native_caches`` must run before the model is loaded or packed;
``tests/serve/test_memory_bounds.py`` measures that it takes effect. A value the user
set in the environment is kept.
"""

from __future__ import annotations

import os

__all__ = ["NATIVE_CACHE_CAPACITY", "NATIVE_CACHE_VARIABLES", "bound_native_caches"]

NATIVE_CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
NATIVE_CACHE_CAPACITY = 64  # primitives per cache (measured: bench/NOTES.md, issue 21)


def bound_native_caches(capacity: int = NATIVE_CACHE_CAPACITY) -> dict[str, str]:
    """Set each cache's capacity unless the environment already does; return what holds."""
    for name in NATIVE_CACHE_VARIABLES:
        os.environ.setdefault(name, str(capacity))
    return {name: os.environ[name] for name in NATIVE_CACHE_VARIABLES}
