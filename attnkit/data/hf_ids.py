"""A Hugging Face ``tokenizer.json``'s ids checked against its size before it is loaded.

``tokenizers`` sizes its tables by the largest id it is given, not by how many
tokens there are: a 3 KB file whose added tokens have ids near 10**9 took 31 s
and 4 GB inside ``Tokenizer.from_str`` and was then accepted with a
vocabulary of 90, and an added id of 70,000 in a 90-id vocabulary failed
later, naming no file. Every id a file defines (the model's vocabulary, its
added tokens, the special tokens its post-processor inserts) is therefore
read from the JSON first and must be a non-negative integer below
``dense_limit(n)`` for the ``n`` distinct ids it defines: at most as many
unused ids as used ones (and 1,024 spare for small vocabularies), so what the
tables cost is bounded by the file's own size.
``attnkit.data.tokenizers.hf_tokenizer_from_json`` checks, then loads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from attnkit.errors import DataError

SPARE_IDS = 1024  # unused ids any vocabulary may have, however small


def dense_limit(count: int) -> int:
    """The smallest id that is too large for a vocabulary of ``count`` distinct ids."""
    return count + max(count, SPARE_IDS)


def _processor_ids(processor: object) -> Iterator[tuple[str, object]]:
    """``(what, id)`` of every special token a post-processor inserts."""
    if not isinstance(processor, dict):
        return
    for sub in processor.get("processors") or []:  # "Sequence"
        yield from _processor_ids(sub)
    specials = processor.get("special_tokens")
    if isinstance(specials, dict):  # TemplateProcessing: {"[CLS]": {"ids": [101], ...}}
        for token, spec in specials.items():
            for i in spec.get("ids", []) if isinstance(spec, dict) else []:
                yield f"post-processor token {token!r}", i
    for key in ("cls", "sep"):  # BertProcessing, RobertaProcessing: ["[CLS]", 101]
        pair = processor.get(key)
        if isinstance(pair, list) and len(pair) == 2:
            yield f"post-processor {key} token {pair[0]!r}", pair[1]


def _defined_ids(data: dict[str, Any]) -> Iterator[tuple[str, object]]:
    """``(what, id)`` of every id the file defines (a Unigram's are its positions)."""
    model = data.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: token -> id
        for token, i in vocab.items():
            yield f"token {token!r}", i
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], ids by position
        yield from ((f"token {i}", i) for i in range(len(vocab)))
    for added in data.get("added_tokens") or []:
        if isinstance(added, dict):
            yield f"added token {added.get('content')!r}", added.get("id")


def check_hf_ids(data: object, where: str) -> int:
    """Refuse (``DataError`` naming ``where`` and the id) an id that is not an integer,
    negative, or not below ``dense_limit``; returns the number of distinct ids."""
    if not isinstance(data, dict):
        raise DataError(f"{where}: not a Hugging Face tokenizer.json (expected an object)")
    found: list[tuple[str, int]] = []
    for what, i in _defined_ids(data):
        if isinstance(i, bool) or not isinstance(i, int) or i < 0:
            raise DataError(f"{where}: {what} has id {i!r}; ids are integers >= 0")
        found.append((what, i))
    count = len({i for _, i in found})
    limit = dense_limit(count)
    for what, i in [*found, *_processor_ids(data.get("post_processor"))]:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < limit:
            raise DataError(
                f"{where}: {what} has id {i!r}, but the file defines {count:,} ids; ids "
                f"must lie in 0..{limit - 1:,} (dense): renumber it"
            )
    return count
