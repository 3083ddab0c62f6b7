"""The tokenizer a run uses: trained on a seeded, bounded sample, or read from the user's file.

Training on a whole WMT-size corpus costs far more than it gains, so the
trainers see a uniform random sample of at most ``tokenizer.sample_size``
records (pairs, or lines of an LM corpus), drawn in one pass with a fixed
seed (Vitter's reservoir algorithm R). SentencePiece does the same with
``input_sentence_size``. A corpus no larger than the sample is used whole and
in order, so small corpora get exactly the tokenizer they always got.

``tokenizer.path`` reuses a vocabulary instead: a SentencePiece ``.model``,
a Hugging Face ``tokenizer.json`` (its special tokens found by name; a pad
token is added when it has none) or a tokenizer JSON attnkit saved.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from attnkit.data.hf_ids import check_hf_ids
from attnkit.data.readers import read_document
from attnkit.data.tokenizer_kinds import tokenizer_from_json
from attnkit.data.tokenizers import BPETokenizer, CharTokenizer, Tokenizer, import_hf_tokenizers
from attnkit.errors import DataError, UsageError

T = TypeVar("T")

TRAINED_KINDS = ("bpe", "char", "unigram")
SAMPLE_SEED = 0  # the sample never depends on train.seed: runs with other seeds share it


class Reservoir(Generic[T]):
    """A uniform random sample of at most ``size`` items of a stream (``size`` 0: all).

    With ``size`` items or fewer, the sample is every item, in order.
    """

    def __init__(self, size: int, seed: int = SAMPLE_SEED):
        if size < 0:
            raise UsageError(f"sample size must be >= 0, got {size}")
        self.size, self.seen = size, 0
        self.items: list[T] = []
        self._rng = np.random.default_rng(seed)

    def add(self, items: Sequence[T]) -> None:
        """Offer the next ``items`` of the stream."""
        free = len(items) if self.size == 0 else max(0, self.size - len(self.items))
        self.items.extend(items[:free])
        rest = items[free:]
        self.seen += min(free, len(items))
        if not rest:
            return
        # Item number t (1-based) replaces slot j, drawn from [0, t), when j < size.
        slots = self._rng.integers(0, self.seen + 1 + np.arange(len(rest)))
        for i in np.flatnonzero(slots < self.size).tolist():
            self.items[int(slots[i])] = rest[i]
        self.seen += len(rest)


def train_tokenizer(kind: str, texts: list[str], vocab_size: int) -> Tokenizer:
    """A ``bpe``, ``char`` or ``unigram`` tokenizer trained on ``texts``."""
    if kind == "char":
        return CharTokenizer.train(texts)
    if kind == "bpe":
        return BPETokenizer.train(texts, vocab_size)
    if kind == "unigram":
        from attnkit.data.unigram import SentencePieceTokenizer

        return SentencePieceTokenizer.train_unigram(texts, vocab_size)
    raise UsageError(f"tokenizer.kind: expected one of {', '.join(TRAINED_KINDS)}, got {kind!r}")


# Special tokens of common vocabularies, most likely first.
_NAMES = {
    "pad_id": ("<pad>", "[PAD]", "<|pad|>", "<|padding|>"),
    "bos_id": ("<s>", "<bos>", "[CLS]", "<|begin_of_text|>", "<|im_start|>", "<|endoftext|>"),
    "eos_id": ("</s>", "<eos>", "[SEP]", "<|end_of_text|>", "<|im_end|>", "<|endoftext|>"),
    "unk_id": ("<unk>", "[UNK]", "<|unk|>"),
}


def load_tokenizer_file(path: str | Path) -> Tokenizer:
    """The tokenizer in ``path``: a SentencePiece ``.model`` or a tokenizer JSON."""
    p = Path(path)
    if p.suffix == ".model":
        from attnkit.data.unigram import SentencePieceTokenizer

        return SentencePieceTokenizer.from_file(p)
    text = read_document(p)  # its errors name the file (JSON: no line ceiling)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{p}:{e.lineno}: not valid JSON ({e.msg})") from None
    if isinstance(data, dict) and "kind" in data:  # one attnkit saved
        try:
            return tokenizer_from_json(text)
        except DataError as e:
            raise DataError(f"{p}: {e}") from None
    check_hf_ids(data, str(p))  # before tokenizers sizes its tables by the largest id
    return _hf_tokenizer(p, text)


def _hf_tokenizer(path: Path, text: str) -> Tokenizer:
    """A Hugging Face ``tokenizer.json``, its special ids found by name."""
    from attnkit.data.pretrained_tokenizer import PretrainedTokenizer

    tk = import_hf_tokenizers()
    try:
        hf = tk.Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises a bare Exception naming the JSON problem
        raise DataError(f"{path}: not a Hugging Face tokenizer.json ({e})") from None
    ids: dict[str, Any] = {}
    for name, candidates in _NAMES.items():
        found = (hf.token_to_id(t) for t in candidates)
        ids[name] = next((int(i) for i in found if i is not None), None)
    ids["bos_id"] = ids["bos_id"] if ids["bos_id"] is not None else ids["eos_id"]
    ids["eos_id"] = ids["eos_id"] if ids["eos_id"] is not None else ids["bos_id"]
    if ids["bos_id"] is None:
        raise DataError(
            f"{path}: no begin/end-of-sequence token found (looked for "
            f"{', '.join(_NAMES['eos_id'])}); add one to the tokenizer"
        )
    if ids["pad_id"] is None:  # attnkit pads batches: give the vocabulary a pad token
        hf.add_special_tokens(["<pad>"])
        ids["pad_id"] = int(hf.token_to_id("<pad>"))
    return PretrainedTokenizer.with_special_skipped(hf, encode_special_tokens=True, **ids)
