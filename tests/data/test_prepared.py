"""Preparing once: the same tokenizer and ids as the in-memory path, uint32 when needed, reuse."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnkit.data import prepared
from attnkit.data.formats import pair_inputs, read_pairs, text_inputs
from attnkit.data.lm import train_lm_tokenizer
from attnkit.data.pair_batches import encode_pairs
from attnkit.data.prepared import (
    pair_tokenizer,
    prefetch,
    prepare_pairs,
    prepare_text,
    text_tokenizer,
)
from attnkit.data.readers import read_text
from attnkit.data.tokenizer_kinds import load_tokenizer
from attnkit.data.tokenizers import BPETokenizer, Tokenizer

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 40


class Settings:
    def __init__(self, kind: str = "bpe", vocab_size: int = 120, sample_size: int = 1000):
        self.kind, self.vocab_size, self.sample_size = kind, vocab_size, sample_size


@pytest.fixture
def corpus(tmp_path: Path) -> list:
    words = ["ein", "Hund", "zwei", "Katzen", "laufen", "schnell", "im", "Park", "Haus"]
    src = [" ".join(words[(i * 7 + j) % 9] for j in range(1 + i % 7)) for i in range(300)]
    (tmp_path / "train.de").write_text("".join(s + "\n" for s in src))
    (tmp_path / "train.en").write_text("".join(s[::-1] + "\n" for s in src))
    return pair_inputs(tmp_path, "train", "de", "en")


def test_prepared_pairs_equal_the_in_memory_encoding(tmp_path, corpus) -> None:
    root = tmp_path / "cache"
    tok = pair_tokenizer(corpus, Settings(), skip_empty=False, root=root)
    pairs = read_pairs(corpus, skip_empty=False).pairs
    # Small corpus: the sample is every pair, so the tokenizer is the one always trained.
    want_tok = BPETokenizer.train([s for s, _ in pairs] + [t for _, t in pairs], 120)
    assert tok.to_json() == want_tok.to_json()
    got = prepare_pairs(corpus, tok, skip_empty=False, root=root)
    want = encode_pairs(pairs, tok)
    for side in ("src", "tgt"):
        g, w = getattr(got.pairs, side), getattr(want, side)
        assert g.ids.dtype == np.uint16 and np.array_equal(g.ids, w.ids)
        assert np.array_equal(g.offsets, w.offsets) and np.array_equal(g.lengths, w.lengths)
    # A resumed run holds the tokenizer as its checkpoint saved it: the same data is found.
    tok.save(tmp_path / "saved.json")
    said: list[str] = []
    again = prepare_pairs(corpus, load_tokenizer(tmp_path / "saved.json"), skip_empty=False,
                          root=root, log=said.append)  # fmt: skip
    assert again.directory == got.directory and said[0].startswith("reusing")


class BigVocabulary(Tokenizer):
    """Ids past 65,535: what a 100k vocabulary's encoder returns (the store is under test)."""

    kind = "word"

    def __init__(self) -> None:
        super().__init__(pad_id=0, bos_id=1, eos_id=2, unk_id=3)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> BigVocabulary:
        return cls()

    @property
    def vocab_size(self) -> int:
        return 100_000

    def encode(self, text: str) -> list[int]:
        return [70_000 + len(w) for w in text.split()]

    def decode(self, ids: Sequence[int]) -> str:
        return ""

    def id_to_token(self, i: int) -> str:
        return str(i)

    def _state(self) -> dict[str, Any]:
        return {"pieces": []}


def test_a_vocabulary_over_65536_ids_is_stored_as_uint32(tmp_path, corpus) -> None:
    got = prepare_pairs(corpus, BigVocabulary(), skip_empty=False, root=tmp_path / "cache")
    assert got.pairs.src.ids.dtype == np.uint32
    first = read_pairs(corpus, skip_empty=False).pairs[0][0]
    assert got.pairs.src[0].tolist() == BigVocabulary().encode(first)


@pytest.mark.parametrize(("kind", "vocab"), [("char", 0), ("bpe", 60)])
def test_a_prepared_lm_stream_equals_encoding_the_whole_text(tmp_path, monkeypatch, kind, vocab):
    monkeypatch.setattr(prepared, "TEXT_PIECE_CHARS", 50)  # many pieces, cut at spaces
    monkeypatch.setattr(prepared, "TEXT_PIECES_PER_BATCH", 3)
    path = tmp_path / "input.txt"
    path.write_text(TEXT)
    inputs = text_inputs(tmp_path, "input.txt")
    root = tmp_path / "cache"
    tok = text_tokenizer(inputs, Settings(kind, vocab or 8, 10_000), root=root)
    old = train_lm_tokenizer(read_text(path), kind, vocab or None)  # the in-memory path's
    assert tok.to_json() == old.to_json()
    stream = prepare_text(inputs, tok, root=root)
    assert stream.ids.tolist() == tok.encode(read_text(path))
    stream.release()
    assert stream.ids[:5].tolist() == tok.encode(read_text(path))[:5]


def test_prefetch_keeps_order_and_raises_the_readers_error() -> None:
    assert list(prefetch(iter(range(100)), depth=3)) == list(range(100))

    def broken():
        yield 1
        raise ValueError("line 2 is bad")

    got = []
    with pytest.raises(ValueError, match="line 2 is bad"):
        for x in prefetch(broken()):
            got.append(x)
    assert got == [1]
    # Stopping early leaves no thread blocked on a full queue.
    for x in prefetch(iter(range(10_000)), depth=1):
        if x == 3:
            break


def test_progress_lines_count_what_was_done() -> None:
    said: list[str] = []
    progress = prepared.Progress(said.append, "pairs encoded", every=0.0)
    progress.add(1500)
    progress.add(500)
    assert [s.split("(")[0] for s in said] == [
        "  ... 1,500 pairs encoded ",
        "  ... 2,000 pairs encoded ",
    ]
    quiet = prepared.Progress(said.append, "pairs", every=3600.0)
    quiet.add(10)
    assert len(said) == 2
