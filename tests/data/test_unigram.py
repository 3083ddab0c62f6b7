"""SentencePiece unigram tokenizers: round trip, byte fallback, ``.model`` files, JSON state."""

from __future__ import annotations

import io

import pytest

from attnkit.data.tokenizer_kinds import load_tokenizer, tokenizer_from_json
from attnkit.data.unigram import SentencePieceTokenizer
from attnkit.errors import DataError, UsageError

spm = pytest.importorskip("sentencepiece")

TEXTS = [
    "Ein Mann fährt auf einem Fahrrad.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau liest ein Buch im Park.",
    "Kinder laufen über die Wiese.",
] * 30


@pytest.fixture(scope="module")
def unigram() -> SentencePieceTokenizer:
    return SentencePieceTokenizer.train_unigram(TEXTS, 300)


def test_round_trip_with_attnkit_special_ids(unigram) -> None:
    assert (unigram.pad_id, unigram.bos_id, unigram.eos_id, unigram.unk_id) == (0, 1, 2, 3)
    assert unigram.vocab_size <= 300 and unigram.id_to_token(4) == "<0x00>"
    for text in [*TEXTS[:4], "  zwei  Leerzeichen ", "Hunde im Park."]:
        ids = unigram.encode(text)
        assert unigram.decode(ids) == text  # exactly: no normalization, no space folding
        assert 3 not in ids
    assert unigram.encode_batch(TEXTS[:3]) == [unigram.encode(t) for t in TEXTS[:3]]


def test_unseen_characters_fall_back_to_bytes_and_come_back(unigram) -> None:
    text = "Ein 🐍 und 漢字, <s> </s> <0x41>"
    ids = unigram.encode(text)
    pieces = [unigram.id_to_token(i) for i in ids]
    assert "<0xF0>" in pieces  # the snake as its UTF-8 bytes, not <unk>
    assert 3 not in ids and not {0, 1, 2} & set(ids)  # "<s>" in text is characters, not BOS
    assert unigram.decode(ids) == text
    assert unigram.decode([1, *ids, 2, 0, 0]) == text  # BOS/EOS/pad are dropped


def test_json_state_round_trip(unigram, tmp_path) -> None:
    path = tmp_path / "tokenizer.json"
    unigram.save(path)
    again = load_tokenizer(path)
    assert isinstance(again, SentencePieceTokenizer) and again.to_json() == unigram.to_json()
    assert again.encode(TEXTS[1]) == unigram.encode(TEXTS[1])
    with pytest.raises(DataError, match="sentencepiece"):
        tokenizer_from_json('{"kind": "sentencepiece", "version": 1, "model": "bm90IGEgbW9kZWw="}')


def test_a_users_model_file_keeps_its_ids_and_gets_a_pad_id(tmp_path) -> None:
    model = io.BytesIO()  # SentencePiece's defaults: unk 0, BOS 1, EOS 2, no pad
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXTS), model_writer=model,
                                   vocab_size=40, model_type="unigram", minloglevel=2)  # fmt: skip
    path = tmp_path / "user.model"
    path.write_bytes(model.getvalue())
    tok = SentencePieceTokenizer.from_file(path)
    reference = spm.SentencePieceProcessor(model_file=str(path))
    assert (tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    assert tok.pad_id == 40 and tok.vocab_size == 41 and tok.id_to_token(40) == "<pad>"
    assert tok.encode(TEXTS[0]) == reference.encode(TEXTS[0])
    assert tok.decode(tok.encode(TEXTS[2]) + [tok.pad_id]) == TEXTS[2]
    (tmp_path / "bad.model").write_bytes(b"not a model")
    with pytest.raises(DataError, match=r"bad\.model: not a SentencePiece model"):
        SentencePieceTokenizer.from_file(tmp_path / "bad.model")


def test_a_vocabulary_too_small_for_the_bytes_is_refused() -> None:
    with pytest.raises(UsageError, match="vocab_size=200 is too small for a unigram"):
        SentencePieceTokenizer.train_unigram(TEXTS, 200)
