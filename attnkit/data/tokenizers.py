"""Tokenizers behind one small interface: BPE (HF ``tokenizers``), character, word.

Every tokenizer reports its own special ids (``pad_id``, ``bos_id``,
``eos_id``, ``unk_id``, ``mask_id``); models, collation and decoding read them
from the tokenizer (or from the model config built from it), never from a
constant. The tokenizers attnkit trains all use the same four, first in the
vocabulary, so every checkpoint they wrote reads the same:

    0 <pad>   1 <s> (BOS)   2 </s> (EOS)   3 <unk>        (no mask token)

``PretrainedTokenizer`` (``attnkit.data.pretrained_tokenizer``) wraps an
imported model's own vocabulary with the ids that model uses (BERT: ``[PAD]``
0, ``[UNK]`` 100, ``[CLS]`` 101, ``[SEP]`` 102, ``[MASK]`` 103).

``encode`` adds no BOS/EOS (collation does); ``decode`` drops pad/BOS/EOS and
detokenizes, showing unknown pieces as ``<unk>``. A tokenizer serialises to
JSON with a ``"kind"`` field; ``attnkit.data.tokenizer_kinds`` reads it back.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Self

from attnkit import jsonio
from attnkit.data.bounded import check_text_lengths
from attnkit.data.hf_ids import check_hf_ids
from attnkit.errors import AttnkitError, DataError, UsageError

if TYPE_CHECKING:
    import tokenizers as hf_tokenizers

# The special ids of the tokenizers attnkit trains (BPE, char, word).
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
FORMAT_VERSION = 1  # the "version" of every tokenizer JSON
_METASPACE = "\u2581"  # "▁", SentencePiece's word-start marker


def import_hf_tokenizers() -> ModuleType:
    """The ``tokenizers`` package, or ``AttnkitError`` naming the extra that installs it."""
    try:
        import tokenizers
    except ImportError:
        raise AttnkitError(
            "BPE tokenizers need the 'tokenizers' package: pip install 'attnkit[train]'"
        ) from None
    return tokenizers


def hf_tokenizer_from_json(data: object, where: str) -> hf_tokenizers.Tokenizer:
    """``tokenizers.Tokenizer`` from a parsed ``tokenizer.json``, its ids checked first
    (``attnkit.data.hf_ids``: ``tokenizers`` sizes its tables by the largest id)."""
    check_hf_ids(data, where)
    return import_hf_tokenizers().Tokenizer.from_str(jsonio.dumps(data))


def hf_batch_ids(hf: hf_tokenizers.Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """The ids of ``texts`` from an HF ``tokenizers.Tokenizer``, on all cores, no special tokens.

    ``encode_batch_fast`` (tokenizers >= 0.20) is ``encode_batch`` without the
    character offsets, which attnkit never reads: the same ids, ~20% less work
    for the Rust side on Multi30k-like text (bench/NOTES.md, issue 24).
    """
    encode = getattr(hf, "encode_batch_fast", None) or hf.encode_batch
    return [e.ids for e in encode(list(texts), add_special_tokens=False)]


# Token ids with each token's character span ``(start, end)`` in its text.
Offsets = list[tuple[int, int]]


def hf_batch_offsets(
    hf: hf_tokenizers.Tokenizer, texts: Sequence[str]
) -> list[tuple[list[int], Offsets]]:
    """The ids of ``texts`` and each token's character span in its text (HF's offsets,
    which point into the text as given, before normalisation), no special tokens."""
    encoded = hf.encode_batch(list(texts), add_special_tokens=False)
    return [(list(e.ids), [(int(a), int(b)) for a, b in e.offsets]) for e in encoded]


class Tokenizer(ABC):
    """Text <-> token ids, with the special ids this tokenizer uses.

    Attributes:
        pad_id, bos_id, eos_id: padding, begin and end of sequence.
        unk_id: what unknown text encodes to; ``None`` when nothing is unknown
            (a byte-level vocabulary such as GPT-2's).
        mask_id: the mask token of a masked LM's own vocabulary (an imported
            BERT's ``[MASK]``); ``None`` otherwise (``attnkit.data.mlm.mlm_vocab``
            then gives the model one more id for it).
    """

    kind: ClassVar[str]
    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int | None
    mask_id: int | None

    def __init__(
        self,
        *,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        unk_id: int | None,
        mask_id: int | None = None,
    ) -> None:
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.unk_id, self.mask_id = unk_id, mask_id

    @property
    def special_ids(self) -> list[int]:
        """The ids above that this tokenizer has (sorted, each once)."""
        ids = (self.pad_id, self.bos_id, self.eos_id, self.unk_id, self.mask_id)
        return sorted({i for i in ids if i is not None})

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
    def _state(self) -> dict[str, object]:
        """Everything but ``kind``/``version`` needed to rebuild the tokenizer."""

    @classmethod
    @abstractmethod
    def from_state(cls, state: dict[str, object]) -> Self:
        """Rebuild the tokenizer from its JSON object (what ``_state`` wrote)."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` for many texts (BPE overrides it with HF's parallel encoder)."""
        return [self.encode(t) for t in texts]

    def encode_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], Offsets]]:
        """Each text's ids and every token's character span ``(start, end)`` in it
        (extractive question answering maps a predicted span of tokens back to text).
        Tokenizers that cannot say where a token came from raise ``DataError``."""
        raise DataError(
            f"a {self.kind} tokenizer gives no character offsets; extractive question "
            "answering needs a char, BPE or pretrained (Hugging Face) tokenizer"
        )

    def to_json(self) -> str:
        return jsonio.dumps(
            {"kind": self.kind, "version": FORMAT_VERSION, **self._state()}, ensure_ascii=False
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    def _drop_special(self, ids: Sequence[int]) -> list[int]:
        # unk is kept: decode shows it, so lost content stays visible in outputs.
        dropped = (self.pad_id, self.bos_id, self.eos_id)
        return [int(i) for i in ids if int(i) not in dropped]


class _OwnSpecials(Tokenizer):
    """A tokenizer attnkit trains: the four special ids of ``SPECIAL_TOKENS``, first."""

    def __init__(self) -> None:
        super().__init__(pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID)


def _check_vocab_size(vocab_size: int) -> None:
    minimum = len(SPECIAL_TOKENS) + 1
    if vocab_size < minimum:
        raise UsageError(
            f"vocab_size={vocab_size} is too small: the {len(SPECIAL_TOKENS)} special tokens "
            f"need ids 0-3, so vocab_size must be >= {minimum}"
        )


class _PieceVocab(_OwnSpecials):
    """Shared code of the char and word tokenizers: a list of pieces after the specials."""

    def __init__(self, pieces: Sequence[str]):
        super().__init__()
        self.pieces = list(SPECIAL_TOKENS) + list(pieces)
        # Specials are left out of the lookup: text "<s>" must never encode as BOS.
        n = len(SPECIAL_TOKENS)
        self._index = {p: i for i, p in enumerate(self.pieces) if i >= n}

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def id_to_token(self, i: int) -> str:
        return self.pieces[i]

    def _state(self) -> dict[str, object]:
        return {"pieces": self.pieces[len(SPECIAL_TOKENS) :]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        return cls(state["pieces"])

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

    def encode_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], Offsets]]:
        return [(self.encode(t), [(i, i + 1) for i in range(len(t))]) for t in texts]

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


class BPETokenizer(_OwnSpecials):
    """Joint byte-pair encoding (Sennrich et al., 2016) trained with HF ``tokenizers``.

    Pre-tokenization is SentencePiece-style Metaspace: each space becomes part
    of the next piece (``"▁Haus"``), so ``decode`` restores the original
    spacing exactly (one leading space aside) and pieces stay readable in
    attention maps. Characters never seen in training map to ``<unk>``.
    """

    kind = "bpe"

    def __init__(self, hf_tokenizer: hf_tokenizers.Tokenizer):
        super().__init__()
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
        """Learn merges on ``texts`` (source and target together for a joint vocabulary).

        Every text must be within the readers' line ceiling (``bounded``): HF's
        trainer aborts the process (a Rust allocation failure) on a huge one."""
        _check_vocab_size(vocab_size)
        texts = texts if isinstance(texts, list) else list(texts)
        check_text_lengths(texts, "tokenizer training")
        tk = import_hf_tokenizers()
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
        return hf_batch_ids(self._hf, texts)

    def encode_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], Offsets]]:
        return hf_batch_offsets(self._hf, texts)

    def decode(self, ids: Sequence[int]) -> str:
        return self._hf.decode(self._drop_special(ids), skip_special_tokens=False)

    def id_to_token(self, i: int) -> str:
        token = self._hf.id_to_token(int(i))
        return f"<id {i}>" if token is None else token

    def _state(self) -> dict[str, Any]:
        # The HF tokenizer's own JSON, embedded as an object (readable, diffable).
        return {"hf": json.loads(self._hf.to_str())}

    @classmethod
    def from_state(cls, state: dict[str, object]) -> Self:
        return cls(hf_tokenizer_from_json(state["hf"], "tokenizer JSON"))
