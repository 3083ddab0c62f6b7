"""SentencePiece tokenizers: unigram training (``tokenizer.kind: unigram``) and ``.model`` files.

``SentencePieceTokenizer`` wraps the ``sentencepiece`` package (Kudo and
Richardson, 2018), so a ``.model`` file a user already has is read exactly
as SentencePiece reads it, and ``train_unigram`` learns a new one with the
unigram language model (Kudo, 2018) and SentencePiece's conventions:

* a space becomes part of the next piece (``"▁Haus"``); no normalization
  and no whitespace folding, so ``decode(encode(text)) == text`` exactly;
* **byte fallback**: a character the vocabulary lacks is encoded as its
  UTF-8 bytes (pieces ``<0x00>`` .. ``<0xFF>``, never matched from text) and
  decodes back to itself, so nothing becomes ``<unk>``;
* text such as ``"<s>"`` is encoded as characters, never as a special id.

A trained model uses attnkit's ids (pad 0, BOS 1, EOS 2, unk 3, then the 256
byte pieces, then the learnt pieces). A user's ``.model`` keeps its own ids
(SentencePiece's default: unk 0, BOS 1, EOS 2, no pad); an id the file
lacks (usually pad) is added after its pieces. The model travels inside the
tokenizer's JSON (base64), so checkpoints stay self-contained.
"""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Self

from attnkit.data.tokenizers import SPECIAL_TOKENS, Tokenizer
from attnkit.errors import AttnkitError, DataError, UsageError

BYTE_PIECES = 256


def _import_sentencepiece() -> ModuleType:
    try:
        import sentencepiece
    except ImportError:
        raise AttnkitError(
            "unigram tokenizers need the 'sentencepiece' package: pip install 'attnkit[train]'"
        ) from None
    return sentencepiece


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model (unigram or BPE) with explicit special ids (see the module doc)."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes):
        spm = _import_sentencepiece()
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
        except Exception as e:  # sentencepiece raises RuntimeError/OSError with its own text
            raise DataError(f"not a SentencePiece model ({e})") from None
        self._proto = bytes(model_proto)
        self._pieces = int(self._sp.get_piece_size())
        # Ids the file lacks (-1) get new ids after its pieces.
        extra: list[str] = []

        def own(value: int, name: str) -> int:
            if value >= 0:
                return value
            extra.append(name)
            return self._pieces + len(extra) - 1

        pad_id = own(self._sp.pad_id(), "<pad>")
        bos_id = own(self._sp.bos_id(), "<s>")
        eos_id = own(self._sp.eos_id(), "</s>")
        unk = int(self._sp.unk_id())
        self._extra = extra
        super().__init__(
            pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, unk_id=unk if unk >= 0 else None
        )

    @classmethod
    def train_unigram(cls, texts: Iterable[str], vocab_size: int) -> SentencePieceTokenizer:
        """Learn a unigram model of ``vocab_size`` ids (specials and bytes included)."""
        fixed = len(SPECIAL_TOKENS) + BYTE_PIECES
        if vocab_size <= fixed:
            raise UsageError(
                f"vocab_size={vocab_size} is too small for a unigram tokenizer: the "
                f"{len(SPECIAL_TOKENS)} special tokens and {BYTE_PIECES} byte pieces need "
                f"vocab_size > {fixed}"
            )
        spm = _import_sentencepiece()
        texts = (t for t in texts if t)  # SentencePiece counts an empty line as a sentence
        model = io.BytesIO()
        pad, bos, eos, unk = SPECIAL_TOKENS
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(texts), model_writer=model, model_type="unigram",
                vocab_size=vocab_size, hard_vocab_limit=False, byte_fallback=True,
                pad_id=0, bos_id=1, eos_id=2, unk_id=3,
                pad_piece=pad, bos_piece=bos, eos_piece=eos, unk_piece=unk, unk_surface=unk,
                normalization_rule_name="identity", remove_extra_whitespaces=False,
                input_sentence_size=0, shuffle_input_sentence=False,
                num_threads=os.cpu_count() or 1, minloglevel=2,
            )  # fmt: skip
        except RuntimeError as e:
            raise UsageError(f"unigram tokenizer training failed: {e}") from None
        return cls(model.getvalue())

    @classmethod
    def from_file(cls, path: str | Path) -> SentencePieceTokenizer:
        """A user's SentencePiece ``.model`` file."""
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise DataError(f"{path}: cannot read the file ({e.strerror or e})") from None
        try:
            return cls(data)
        except DataError as e:
            raise DataError(f"{path}: {e}") from None

    @property
    def vocab_size(self) -> int:
        return self._pieces + len(self._extra)

    def encode(self, text: str) -> list[int]:
        return list(self._sp.encode(text))

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return list(self._sp.encode(list(texts), num_threads=os.cpu_count() or 1))

    def decode(self, ids: Sequence[int]) -> str:
        kept = [i for i in self._drop_special(ids) if i < self._pieces]
        return str(self._sp.decode(kept))

    def id_to_token(self, i: int) -> str:
        if 0 <= i < self._pieces:
            return str(self._sp.id_to_piece(i))
        if self._pieces <= i < self.vocab_size:
            return self._extra[i - self._pieces]
        return f"<id {i}>"

    def _state(self) -> dict[str, object]:
        return {"model": base64.b64encode(self._proto).decode("ascii")}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        return cls(base64.b64decode(state["model"]))
