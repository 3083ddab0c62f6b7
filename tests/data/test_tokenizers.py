"""Tokenizers: round trips, their special ids, JSON serialisation, bad vocab sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnkit.data.readers import read_lines
from attnkit.data.tokenizer_kinds import load_tokenizer, tokenizer_from_json
from attnkit.data.tokenizers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    BPETokenizer,
    CharTokenizer,
    Tokenizer,
    WordTokenizer,
)
from attnkit.errors import UsageError

CORPUS = [
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.",
    "Two young, White males are outside near many bushes.",
    "A little girl climbing into a wooden playhouse.",
    "Drei Hunde (2 braune, 1 schwarzer) spielen um 10:30 Uhr!",
    "Three dogs - two brown, one black - play at 10:30?",
    "Über 42 Köche öffnen Äpfel; groß & süß.",
] * 4

SENTENCES = [
    "Zwei junge Männer spielen im Freien.",
    "A girl, 3 dogs and 42 bushes!",
    "Über Köche: süß & groß?",
    "10:30 Uhr (Holz).",
]


@pytest.fixture(scope="module")
def bpe() -> BPETokenizer:
    return BPETokenizer.train(CORPUS, vocab_size=200, min_frequency=2)


def test_bpe_round_trip(bpe: BPETokenizer) -> None:
    for s in SENTENCES:
        ids = bpe.encode(s)
        assert bpe.unk_id not in ids
        assert bpe.decode(ids) == s


def test_bpe_merges_and_respects_vocab_size(bpe: BPETokenizer) -> None:
    assert bpe.vocab_size <= 200
    # Merges happened: frequent words are fewer pieces than characters.
    assert len(bpe.encode("Männer")) < len("Männer")


def test_special_ids_fixed_and_dropped_by_decode(bpe: BPETokenizer) -> None:
    assert [bpe.id_to_token(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert (bpe.pad_id, bpe.bos_id, bpe.eos_id, bpe.unk_id, bpe.mask_id) == (0, 1, 2, 3, None)
    assert bpe.special_ids == [0, 1, 2, 3]
    ids = bpe.encode("Zwei Hunde.")
    assert bpe.decode([bpe.bos_id, *ids, bpe.eos_id, bpe.pad_id, bpe.pad_id]) == "Zwei Hunde."
    assert bpe.encode("x <s> y").count(bpe.bos_id) == 0  # text "<s>" is not BOS


def test_bpe_unknown_character_is_unk(bpe: BPETokenizer) -> None:
    ids = bpe.encode("Zwei ✓")
    assert bpe.unk_id in ids
    assert bpe.decode(ids) == "Zwei <unk>"


def test_bpe_json_round_trip(bpe: BPETokenizer, tmp_path: Path) -> None:
    again = tokenizer_from_json(bpe.to_json())
    assert isinstance(again, BPETokenizer) and again.vocab_size == bpe.vocab_size
    for s in [*SENTENCES, "x <s> y"]:
        assert again.encode(s) == bpe.encode(s)
    bpe.save(tmp_path / "tok.json")
    assert load_tokenizer(tmp_path / "tok.json").encode(SENTENCES[0]) == bpe.encode(SENTENCES[0])
    assert bpe.encode_batch(SENTENCES) == [bpe.encode(s) for s in SENTENCES]


def test_char_round_trip_and_unk() -> None:
    tok = CharTokenizer.train(CORPUS)
    assert [tok.id_to_token(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    for s in SENTENCES:
        assert tok.decode(tok.encode(s)) == s
        assert len(tok.encode(s)) == len(s)
    assert tok.encode("Z✓") == [tok.encode("Z")[0], tok.unk_id]
    again = tokenizer_from_json(tok.to_json())
    assert isinstance(again, CharTokenizer) and again.encode("Zwei ✓") == tok.encode("Zwei ✓")


def test_char_vocab_keeps_most_frequent() -> None:
    tok = CharTokenizer.train(["aaab", "ac"], vocab_size=6)
    assert tok.vocab_size == 6
    assert tok.encode("abc") == [4, 5, tok.unk_id]  # a (4x), b (1x, alphabetically before c)


def test_the_special_ids_belong_to_each_tokenizer_not_to_the_interface() -> None:
    # An imported vocabulary has its own ids, so the ABC must not offer defaults.
    for name in ("pad_id", "bos_id", "eos_id", "unk_id", "mask_id"):
        assert not hasattr(Tokenizer, name), name
    tok = WordTokenizer(["a", "b"])
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (PAD_ID, BOS_ID, EOS_ID, UNK_ID)


def test_a_tokenizer_saved_before_the_ids_moved_reads_the_same() -> None:
    """Checkpoints written by earlier versions hold exactly this JSON."""
    tok = tokenizer_from_json('{"kind": "char", "version": 1, "pieces": ["a", "b"]}')
    assert tok.encode("abz") == [4, 5, 3] and (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    assert tok.decode([1, 4, 5, 3, 2, 0]) == "ab<unk>"


def test_word_tokenizer() -> None:
    tok = WordTokenizer.train(["a b c", "a b"], min_frequency=2)
    assert tok.decode(tok.encode("a b c")) == "a b <unk>"
    assert tokenizer_from_json(tok.to_json()).encode("b a") == tok.encode("b a")


@pytest.mark.parametrize("vocab_size", [0, 4])
def test_vocab_too_small_for_specials(vocab_size: int) -> None:
    with pytest.raises(UsageError, match=f"vocab_size={vocab_size}"):
        BPETokenizer.train(CORPUS, vocab_size=vocab_size)
    with pytest.raises(UsageError, match=f"vocab_size={vocab_size}"):
        CharTokenizer.train(CORPUS, vocab_size=vocab_size)


def test_bpe_vocab_smaller_than_alphabet() -> None:
    with pytest.raises(UsageError, match=r"vocab_size=20 is too small.*distinct characters"):
        BPETokenizer.train(CORPUS, vocab_size=20)


def test_empty_training_text() -> None:
    with pytest.raises(UsageError, match="empty text"):
        CharTokenizer.train([])


@pytest.mark.slow
def test_bpe_on_multi30k(shared_data: Path) -> None:
    base = shared_data / "multi30k"
    texts = read_lines(base / "train.de") + read_lines(base / "train.en")
    tok = BPETokenizer.train(texts, vocab_size=8000)
    assert tok.vocab_size == 8000
    valid = read_lines(base / "valid.de")
    exact = sum(tok.decode(tok.encode(s)) == s for s in valid)
    assert exact / len(valid) > 0.99
    n_pieces = sum(len(ids) for ids in tok.encode_batch(valid))
    assert n_pieces < 1.5 * sum(len(s.split()) for s in valid)  # mostly whole words
