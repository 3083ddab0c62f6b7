"""attnkit: the Transformer of "Attention Is All You Need" and its family.

The public API, importable from the package itself::

    from attnkit import TransformerConfig, EncoderDecoder, beam_search, load_model

Names are resolved on first use (PEP 562), so ``import attnkit`` and the
``attnkit`` command stay fast; ``torch`` is imported by the first model name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    # models and their configs
    "TransformerConfig": "attnkit.models",
    "EncoderDecoder": "attnkit.models",
    "DecoderOnlyConfig": "attnkit.models",
    "DecoderOnlyLM": "attnkit.models",
    "EncoderOnlyConfig": "attnkit.models",
    "EncoderOnlyModel": "attnkit.models",
    "RNNSeq2SeqConfig": "attnkit.models",
    "RNNSeq2Seq": "attnkit.models",
    "ViTConfig": "attnkit.models",
    "VisionTransformer": "attnkit.models",
    "FAMILIES": "attnkit.models",
    "build_model": "attnkit.models",
    "config_from_dict": "attnkit.models",
    # decoding
    "greedy_search": "attnkit.decoding",
    "beam_search": "attnkit.decoding",
    "sample": "attnkit.decoding",
    "generate": "attnkit.decoding",
    "stream": "attnkit.decoding",
    "stepper_for": "attnkit.decoding",
    "StaticCacheStepper": "attnkit.decoding",
    "translate_texts": "attnkit.decoding.text",
    # CPU inference weights
    "quantize_model": "attnkit.quantize",
    # checkpoints
    "load_model": "attnkit.checkpoints",
    "save_checkpoint": "attnkit.checkpoints",
    # attention
    "attend": "attnkit.attention",
    "MultiHeadAttention": "attnkit.attention",
    # tokenizers
    "BPETokenizer": "attnkit.data.tokenizers",
    "CharTokenizer": "attnkit.data.tokenizers",
}

__all__ = [
    "__version__",
    "TransformerConfig",
    "EncoderDecoder",
    "DecoderOnlyConfig",
    "DecoderOnlyLM",
    "EncoderOnlyConfig",
    "EncoderOnlyModel",
    "RNNSeq2SeqConfig",
    "RNNSeq2Seq",
    "ViTConfig",
    "VisionTransformer",
    "FAMILIES",
    "build_model",
    "config_from_dict",
    "greedy_search",
    "beam_search",
    "sample",
    "generate",
    "stream",
    "stepper_for",
    "StaticCacheStepper",
    "translate_texts",
    "quantize_model",
    "load_model",
    "save_checkpoint",
    "attend",
    "MultiHeadAttention",
    "BPETokenizer",
    "CharTokenizer",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'attnkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # what type checkers and IDEs see
    from attnkit.attention import MultiHeadAttention, attend
    from attnkit.checkpoints import load_model, save_checkpoint
    from attnkit.data.tokenizers import BPETokenizer, CharTokenizer
    from attnkit.decoding import (
        StaticCacheStepper,
        beam_search,
        generate,
        greedy_search,
        sample,
        stepper_for,
        stream,
    )
    from attnkit.decoding.text import translate_texts
    from attnkit.models import (
        FAMILIES,
        DecoderOnlyConfig,
        DecoderOnlyLM,
        EncoderDecoder,
        EncoderOnlyConfig,
        EncoderOnlyModel,
        RNNSeq2Seq,
        RNNSeq2SeqConfig,
        TransformerConfig,
        build_model,
        config_from_dict,
    )
