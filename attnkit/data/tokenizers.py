"""Tokenizers behind one small interface: BPE (HF ``tokenizers``), character, word.

Every tokenizer attnkit trains uses the same four special ids, so models,
collation and decoding never need to ask:

    0 <pad>   1 <s> (BOS)   2 </s> (EOS)   3 <unk>

``PretrainedTokenizer`` (``attnkit.data.pretrained_tokenizer``) is the
exception: it wraps a pretrained ``tokenizers.Tokenizer`` (an imported
model's: BERT's, GPT-2's, Marian's, SmolLM2's) with the special ids that model
uses, so it has instance-level ``pad_id``/``bos_id``/``eos_id``/``unk_id``.

``encode`` adds no BOS/EOS (collation does); ``decode`` drops pad/BOS/EOS and
detokenizes, showing unknown pieces as ``<unk>``. A tokenizer serialises to
JSON with a ``"kind"`` field; ``tokenizer_from_json`` dispatches on it.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from attnkit.data.readers import read_text
from attnkit.errors import AttnkitError, DataError, UsageError

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
_FORMAT_VERSION = 1
_METASPACE = "\u2581"  # "▁", SentencePiece's word-start marker


def _import_hf_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise AttnkitError(
            "BPE tokenizers need the 'tokenizers' package: pip install 'attnkit[train]'"
        ) from None
    return tokenizers


class Tokenizer(ABC):
    """Text <-> token ids. Special ids are pad 0, BOS 1, EOS 2, unk 3.

    The ids are class attributes; only ``PretrainedTokenizer`` (an imported
    model's own vocabulary) sets other values, per instance.
    """

    kind: ClassVar[str]
    # Class-level defaults; PretrainedTokenizer sets its own per instance.
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    unk_id: int | None = UNK_ID

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, special tokens included (ids are ``0 .. vocab_size - 1``)."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; no BOS/EOS added."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Detokenized text; pad/BOS/EOS dropped, unknown pieces shown as ``<unk>``."""

    @abstractmethod
    def id_to_token(self, i: int) -> str:
        """The piece for id ``i`` (for attention-map labels and debugging)."""

    @abstractmethod
    def _state(self) -> dict[str, Any]:
        """Everything but ``kind``/``version`` needed to rebuild the tokenizer."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` for many texts (BPE overrides it with HF's parallel encoder)."""
        return [self.encode(t) for t in texts]

    def to_json(self) -> str:
        return json.dumps(
            {"kind": self.kind, "version": _FORMAT_VERSION, **self._state()}, ensure_ascii=False
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    def _drop_special(self, ids: Sequence[int]) -> list[int]:
        # unk is kept: decode shows it, so lost content stays visible in outputs.
        return [int(i) for i in ids if int(i) not in (PAD_ID, BOS_ID, EOS_ID)]


def _check_vocab_size(vocab_size: int) -> None:
    minimum = len(SPECIAL_TOKENS) + 1
    if vocab_size < minimum:
        raise UsageError(
            f"vocab_size={vocab_size} is too small: the {len(SPECIAL_TOKENS)} special tokens "
            f"need ids 0-3, so vocab_size must be >= {minimum}"
        )


class _PieceVocab(Tokenizer):
    """Shared code of the char and word tokenizers: a list of pieces after the specials."""

    def __init__(self, pieces: Sequence[str]):
        self.pieces = list(SPECIAL_TOKENS) + list(pieces)
        # Specials are left out of the lookup: text "<s>" must never encode as BOS.
        n = len(SPECIAL_TOKENS)
        self._index = {p: i for i, p in enumerate(self.pieces) if i >= n}

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def id_to_token(self, i: int) -> str:
        return self.pieces[i]

    def _state(self) -> dict[str, Any]:
        return {"pieces": self.pieces[len(SPECIAL_TOKENS) :]}

    @staticmethod
    def _count(items: Iterable[str], min_frequency: int, vocab_size: int | None) -> list[str]:
        if vocab_size is not None:
            _check_vocab_size(vocab_size)
        counts = Counter(items)
        if not counts:
            raise UsageError("cannot train a tokenizer on empty text")
        # Most frequent first, ties alphabetical, so training is deterministic.
        ranked = sorted(
            (p for p, c in counts.items() if c >= min_frequency), key=lambda p: (-counts[p], p)
        )
        if vocab_size is not None:
            ranked = ranked[: vocab_size - len(SPECIAL_TOKENS)]
        return ranked


class CharTokenizer(_PieceVocab):
    """One id per character; characters not seen in training map to ``<unk>``."""

    kind = "char"

    @classmethod
    def train(
        cls, texts: Iterable[str], *, vocab_size: int | None = None, min_frequency: int = 1
    ) -> CharTokenizer:
        """Characters seen >= ``min_frequency`` times; the most frequent, up to ``vocab_size``."""
        chars = (ch for text in texts for ch in text)
        return cls(cls._count(chars, min_frequency, vocab_size))

    def encode(self, text: str) -> list[int]:
        return [self._index.get(ch, UNK_ID) for ch in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.pieces[i] for i in self._drop_special(ids))


class WordTokenizer(_PieceVocab):
    """Whitespace-separated words; ``decode`` joins with single spaces."""

    kind = "word"

    @classmethod
    def train(
        cls, texts: Iterable[str], *, vocab_size: int | None = None, min_frequency: int = 1
    ) -> WordTokenizer:
        words = (w for text in texts for w in text.split())
        return cls(cls._count(words, min_frequency, vocab_size))

    def encode(self, text: str) -> list[int]:
        return [self._index.get(w, UNK_ID) for w in text.split()]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.pieces[i] for i in self._drop_special(ids))


class BPETokenizer(Tokenizer):
    """Joint byte-pair encoding (Sennrich et al., 2016) trained with HF ``tokenizers``.

    Pre-tokenization is SentencePiece-style Metaspace: each space becomes part
    of the next piece (``"▁Haus"``), so ``decode`` restores the original
    spacing exactly (one leading space aside) and pieces stay readable in
    attention maps. Characters never seen in training map to ``<unk>``.
    """

    kind = "bpe"

    def __init__(self, hf_tokenizer: Any):
        self._hf = hf_tokenizer
        # Text like "<s>" in a sentence must be encoded as characters, not as BOS.
        if hasattr(self._hf, "encode_special_tokens"):
            self._hf.encode_special_tokens = True
        for i, tok in enumerate(SPECIAL_TOKENS):
            if self._hf.token_to_id(tok) != i:
                raise DataError(f"BPE tokenizer: {tok} must have id {i}")

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int, *, min_frequency: int = 2
    ) -> BPETokenizer:
        """Learn merges on ``texts`` (source and target together for a joint vocabulary)."""
        _check_vocab_size(vocab_size)
        tk = _import_hf_tokenizers()
        hf = tk.Tokenizer(tk.models.BPE(unk_token="<unk>"))
        hf.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement=_METASPACE)
        hf.decoder = tk.decoders.Metaspace(replacement=_METASPACE)
        trainer = tk.trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            show_progress=False,
        )
        hf.train_from_iterator(texts, trainer)
        got = hf.get_vocab_size()
        if got <= len(SPECIAL_TOKENS):
            raise UsageError("cannot train a tokenizer on empty text")
        if got > vocab_size:
            # BPE keeps every character it saw, whatever vocab_size says.
            raise UsageError(
                f"vocab_size={vocab_size} is too small: the training text has "
                f"{got - len(SPECIAL_TOKENS)} distinct characters; use vocab_size >= {got} "
                "or a char tokenizer"
            )
        return cls(hf)

    @property
    def vocab_size(self) -> int:
        return self._hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._hf.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return self._hf.decode(self._drop_special(ids), skip_special_tokens=False)

    def id_to_token(self, i: int) -> str:
        return self._hf.id_to_token(i)

    def _state(self) -> dict[str, Any]:
        # The HF tokenizer's own JSON, embedded as an object (readable, diffable).
        return {"hf": json.loads(self._hf.to_str())}

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> BPETokenizer:
        tk = _import_hf_tokenizers()
        return cls(tk.Tokenizer.from_str(json.dumps(state["hf"])))


def tokenizer_from_json(text: str) -> Tokenizer:
    """Rebuild a tokenizer from ``Tokenizer.to_json()`` output."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"tokenizer JSON: not valid JSON (line {e.lineno})") from None
    from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
    from attnkit.data.unigram import SentencePieceTokenizer

    kinds: dict[str, Any] = {
        "bpe": BPETokenizer,
        "char": CharTokenizer,
        "word": WordTokenizer,
        "pretrained": PretrainedTokenizer,
        "sentencepiece": SentencePieceTokenizer,
        "hf": PretrainedTokenizer,  # GGUF imports saved before PretrainedTokenizer took them
    }
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in kinds:
        raise DataError(
            f"tokenizer JSON: unknown kind {kind!r}; expected one of {', '.join(kinds)}"
        )
    if data.get("version") != _FORMAT_VERSION:
        raise DataError(f"tokenizer JSON: unsupported version {data.get('version')!r}")
    try:
        if kind == "hf":
            return PretrainedTokenizer.from_hf_state(data)
        if kind in ("bpe", "pretrained", "sentencepiece"):
            return kinds[kind]._from_state(data)
        return kinds[kind](data["pieces"])
    except AttnkitError:
        raise
    except Exception as e:  # HF raises a bare Exception for a bad embedded JSON
        raise DataError(f"tokenizer JSON ({kind}): malformed ({type(e).__name__}: {e})") from None


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Read a tokenizer saved with ``Tokenizer.save``."""
    text = read_text(path)  # its errors already name the file
    try:
        return tokenizer_from_json(text)
    except DataError as e:
        raise DataError(f"{path}: {e}") from None
