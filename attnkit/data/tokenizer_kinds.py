"""The tokenizer kinds: a plain table ``kind -> reader``, and reading a tokenizer's JSON.

Every ``Tokenizer.to_json()`` starts with ``{"kind": ..., "version": 1}``;
``tokenizer_from_json`` looks the kind up in ``KINDS`` and hands the object to
its reader. A new kind is one entry here (its class implements ``from_state``).

This module sits above the tokenizer classes (it imports them all), so they
never need to import one another to be read back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.data.readers import read_document
from attnkit.data.tokenizers import (
    FORMAT_VERSION,
    BPETokenizer,
    CharTokenizer,
    Tokenizer,
    WordTokenizer,
    hf_tokenizer_from_json,
)
from attnkit.data.unigram import SentencePieceTokenizer
from attnkit.errors import AttnkitError, DataError

__all__ = ["KINDS", "Tokenizer", "TokenizerReader", "load_tokenizer", "tokenizer_from_json"]

TokenizerReader = Callable[[dict[str, object]], Tokenizer]


def _legacy_hf(state: dict[str, Any]) -> Tokenizer:
    """Kind ``"hf"``: GGUF imports saved before ``PretrainedTokenizer`` took them over
    (the special ids under ``"special_ids"``, decode skipping the file's specials)."""
    specials = state["special_ids"]
    return PretrainedTokenizer.with_special_skipped(
        hf_tokenizer_from_json(state["hf"], "tokenizer JSON"),
        pad_id=specials["pad_id"],
        bos_id=specials["bos_id"],
        eos_id=specials["eos_id"],
        unk_id=specials.get("unk_id"),
        chat_template=state.get("chat_template"),
    )


KINDS: dict[str, TokenizerReader] = {
    "bpe": BPETokenizer.from_state,
    "char": CharTokenizer.from_state,
    "word": WordTokenizer.from_state,
    "pretrained": PretrainedTokenizer.from_state,
    "sentencepiece": SentencePieceTokenizer.from_state,
    "hf": _legacy_hf,
}


def tokenizer_from_json(text: str) -> Tokenizer:
    """Rebuild a tokenizer from ``Tokenizer.to_json()`` output; ``DataError`` if it cannot."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"tokenizer JSON: not valid JSON (line {e.lineno})") from None
    kind = data.get("kind") if isinstance(data, dict) else None
    reader = KINDS.get(kind) if isinstance(kind, str) else None
    if reader is None:
        raise DataError(
            f"tokenizer JSON: unknown kind {kind!r}; expected one of {', '.join(KINDS)}"
        )
    if data.get("version") != FORMAT_VERSION:
        raise DataError(f"tokenizer JSON: unsupported version {data.get('version')!r}")
    try:
        return reader(data)
    except AttnkitError:
        raise
    except Exception as e:  # a missing field, or HF's bare Exception for bad embedded JSON
        raise DataError(f"tokenizer JSON ({kind}): malformed ({type(e).__name__}: {e})") from None


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Read a tokenizer saved with ``Tokenizer.save``."""
    text = read_document(path)  # its errors already name the file
    try:
        return tokenizer_from_json(text)
    except DataError as e:
        raise DataError(f"{path}: {e}") from None
