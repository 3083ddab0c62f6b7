"""NSP sentence pairs: documents from blank lines, half the B's true next sentences and half from
another document, segments and lengths right, held-out documents apart, draws fixed by the seed."""

from __future__ import annotations

import pytest
import torch

from attnkit.data.sentence_pairs import (
    IS_NEXT,
    NOT_NEXT,
    SentencePairs,
    split_documents,
    split_pairs,
)
from attnkit.data.tokenizers import CharTokenizer
from attnkit.errors import DataError

# Five documents; sentence j of document d spells its own place, so a pair's text tells
# which sentences it holds.
TEXT = "\n\n".join(
    "\n".join(f"doc {d} sentence {j}" + " pad" * (j % 3) for j in range(2 + d % 3))
    for d in range(5)
)
BOS, EOS = 1, 2


def _tokenizer() -> CharTokenizer:
    return CharTokenizer.train([TEXT])


def _pairs(text: str = TEXT) -> SentencePairs:
    train, _ = split_pairs(text, _tokenizer(), 0.0, name="t")
    return train


def test_blank_lines_separate_documents_and_lines_are_sentences():
    text = "\n\n  a one  \na two\n\n\n\nb one\n   \nc one\nc two\n\n"
    assert split_documents(text) == [["a one", "a two"], ["b one"], ["c one", "c two"]]
    assert split_documents("x\ny\nz") == [["x", "y", "z"]]  # no blank line: one document


def test_half_the_pairs_are_next_sentences_and_the_seed_fixes_them():
    pairs = _pairs()
    draw = lambda n, seed: pairs.sample(  # noqa: E731
        n, torch.Generator().manual_seed(seed), bos_id=BOS, eos_id=EOS, max_len=64
    )
    for n in (2, 10, 64, 1000):
        assert draw(n, 0).labels.count(NOT_NEXT) == n // 2
    assert {draw(7, seed).labels.count(NOT_NEXT) for seed in range(20)} == {3, 4}
    first, again, other = draw(64, 5), draw(64, 5), draw(64, 6)
    assert first == again
    assert (first.a, first.b, first.labels) != (other.a, other.b, other.labels)
    # the labels are spread over the batch, not one block of each
    assert 0 < first.labels[:32].count(NOT_NEXT) < 32


def test_next_is_the_following_sentence_and_random_comes_from_another_document():
    pairs = _pairs()
    batch = pairs.sample(2000, torch.Generator().manual_seed(1), bos_id=BOS, eos_id=EOS,
                         max_len=64)  # fmt: skip
    seen_docs = set()
    for a, b, label in zip(batch.a, batch.b, batch.labels):
        assert a in pairs.firsts
        if label == IS_NEXT:
            assert b == a + 1 and pairs.document[b] == pairs.document[a]
        else:
            assert b != a + 1 and pairs.document[b] != pairs.document[a]
            seen_docs.add(pairs.document[b])
    assert seen_docs == set(range(5))  # every document gives random B's
    assert set(batch.a) == set(pairs.firsts)  # every A with a next one is drawn


def test_one_document_random_b_is_never_the_next_sentence():
    text = "\n".join(f"line {i}" for i in range(6))
    pairs = _pairs(text)
    assert pairs.single_document and pairs.firsts == [0, 1, 2, 3, 4]
    batch = pairs.sample(500, torch.Generator().manual_seed(2), bos_id=BOS, eos_id=EOS,
                         max_len=64)  # fmt: skip
    for a, b, label in zip(batch.a, batch.b, batch.labels):
        assert (b == a + 1) == (label == IS_NEXT)
        assert 0 <= b < 6


def test_pairs_are_cls_a_sep_b_sep_with_segments_and_fit_max_len():
    tok = _tokenizer()
    pairs = _pairs()
    batch = pairs.sample(200, torch.Generator().manual_seed(3), bos_id=BOS, eos_id=EOS,
                         max_len=64)  # fmt: skip
    for ids, types, a, b in zip(batch.ids, batch.types, batch.a, batch.b):
        sa, sb = pairs.sentences[a], pairs.sentences[b]
        assert ids == [BOS, *sa, EOS, *sb, EOS]  # short enough: nothing cut
        assert types == [0] * (len(sa) + 2) + [1] * (len(sb) + 1)
        assert tok.decode(sa).startswith(f"doc {pairs.document[a]} ")
    short = pairs.sample(200, torch.Generator().manual_seed(3), bos_id=BOS, eos_id=EOS,
                         max_len=20)  # fmt: skip
    for ids, types in zip(short.ids, short.types):
        assert len(ids) == len(types) == 20  # every pair is longer: cut to exactly max_len
        assert ids[0] == BOS and ids[-1] == EOS and ids.count(EOS) == 2
        sep = ids.index(EOS)
        assert types == [0] * (sep + 1) + [1] * (20 - sep - 1)


def test_the_last_documents_are_held_out():
    tok = _tokenizer()
    train, valid = split_pairs(TEXT, tok, 0.4, name="t")
    assert valid is not None
    decode = lambda p: {tok.decode(s).split(" sentence")[0] for s in p.sentences}  # noqa: E731
    assert decode(train) == {"doc 0", "doc 1", "doc 2"}
    assert decode(valid) == {"doc 3", "doc 4"}
    one_doc = "\n".join(f"line {i}" for i in range(10))
    train, valid = split_pairs(one_doc, CharTokenizer.train([one_doc]), 0.3, name="t")
    assert valid is not None and len(train.sentences) == 7 and len(valid.sentences) == 3
    assert split_pairs(TEXT, tok, 0.0, name="t")[1] is None


def test_a_corpus_without_two_sentences_in_a_document_is_refused():
    with pytest.raises(DataError, match="corpus.txt: no document has two sentences"):
        split_pairs("a\n\nb\n\nc", _tokenizer(), 0.0, name="corpus.txt")
    with pytest.raises(DataError, match="corpus.txt: no sentences"):
        split_pairs("\n\n  \n", _tokenizer(), 0.0, name="corpus.txt")
