"""NSP sentence pairs: documents from blank lines, segments of whole sentences, half the B's what
follows A and half from another document, segment ids and lengths right, held-out documents
apart, draws fixed by the seed."""

from __future__ import annotations

import pytest
import torch

from attnkit.data.sentence_pairs import (
    IS_NEXT,
    NOT_NEXT,
    SentencePairs,
    cut_around_join,
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
    draw = lambda n, seed: _draw(pairs, n, seed, 64)  # noqa: E731
    for n in (2, 10, 64, 1000):
        assert draw(n, 0).labels.count(NOT_NEXT) == n // 2
    assert {draw(7, seed).labels.count(NOT_NEXT) for seed in range(20)} == {3, 4}
    first, again, other = draw(64, 5), draw(64, 5), draw(64, 6)
    assert first == again
    assert (first.a, first.b, first.labels) != (other.a, other.b, other.labels)
    # the labels are spread over the batch, not one block of each
    assert 0 < first.labels[:32].count(NOT_NEXT) < 32


def _draw(pairs: SentencePairs, n: int, seed: int, max_len: int):
    generator = torch.Generator().manual_seed(seed)
    return pairs.sample(n, generator, bos_id=BOS, eos_id=EOS, max_len=max_len)


def _join(pairs: SentencePairs, sentences: range) -> list[int]:
    ids: list[int] = []
    for i in sentences:
        ids += (pairs.separator if ids else []) + pairs.sentences[i]
    return ids


@pytest.mark.parametrize("max_len", [20, 64, 400])
def test_next_is_what_follows_and_random_comes_from_another_document(max_len):
    pairs = _pairs()
    batch = _draw(pairs, 2000, 1, max_len)
    seen_docs = set()
    for a, b, label in zip(batch.a, batch.b, batch.labels):
        doc_a = {pairs.document[i] for i in a}
        doc_b = {pairs.document[i] for i in b}
        assert a.start in pairs.firsts and len(doc_a) == len(doc_b) == 1 and len(b) >= 1
        if label == IS_NEXT:
            assert b.start == a.stop and doc_a == doc_b
        else:
            assert b.start != a.stop and doc_a != doc_b
            seen_docs |= doc_b
    assert seen_docs == set(range(5))  # every document gives random B's
    assert {a.start for a in batch.a} == set(pairs.firsts)  # A starts at every possible place
    if max_len == 20:  # one sentence fills the pair: segments of one sentence
        assert {len(a) for a in batch.a} == {len(b) for b in batch.b} == {1}
    if max_len == 400:  # everything fits: A and its true B are the rest of the document
        ends = {pairs.doc_start[d + 1] for d in range(5)}
        assert all(b.stop in ends for b, y in zip(batch.b, batch.labels) if y == IS_NEXT)
        assert max(len(a) for a in batch.a) == 3  # up to all but the last of 4 sentences


def test_one_document_random_b_never_starts_at_the_next_sentence():
    text = "\n".join(f"line {i}" for i in range(6))
    pairs = _pairs(text)
    assert pairs.single_document and pairs.firsts == [0, 1, 2, 3, 4]
    batch = _draw(pairs, 500, 2, 16)
    for a, b, label in zip(batch.a, batch.b, batch.labels):
        assert (b.start == a.stop) == (label == IS_NEXT)
        assert 0 <= b.start < b.stop <= 6


def test_pairs_are_cls_a_sep_b_sep_with_segments_and_fit_max_len():
    tok = _tokenizer()
    pairs = _pairs()
    assert pairs.separator == tok.encode("\n")  # sentences of a segment: joined by a newline
    batch = _draw(pairs, 200, 3, 400)
    for ids, types, a, b in zip(batch.ids, batch.types, batch.a, batch.b):
        sa, sb = _join(pairs, a), _join(pairs, b)
        assert ids == [BOS, *sa, EOS, *sb, EOS]  # short enough: nothing cut
        assert types == [0] * (len(sa) + 2) + [1] * (len(sb) + 1)
        doc = pairs.document[a.start]
        place = f"doc {doc} sentence {a.start - pairs.doc_start[doc]}"
        assert tok.decode(sa).startswith(place)
    for max_len in (20, 48):
        short = _draw(pairs, 200, 3, max_len)
        for ids, types, a, b in zip(short.ids, short.types, short.a, short.b):
            # segments are filled past the budget (a document allowing), then cut
            assert len(ids) == len(types) <= max_len
            assert ids[0] == BOS and ids[-1] == EOS and ids.count(EOS) == 2
            sep = ids.index(EOS)
            assert types == [0] * (sep + 1) + [1] * (len(ids) - sep - 1)
            # around the join: A keeps its end, B its start
            kept_a, kept_b = ids[1:sep], ids[sep + 1 : -1]
            assert _join(pairs, a)[-len(kept_a) :] == kept_a
            assert _join(pairs, b)[: len(kept_b)] == kept_b
        lengths = [len(ids) for ids in short.ids]
        if max_len == 20:
            assert set(lengths) == {20}  # every pair is longer
        else:
            assert max(lengths) == max_len


def test_a_pair_is_cut_around_its_join_longer_segment_first():
    a, b = list(range(10)), list(range(100, 104))
    assert cut_around_join(a, b, 20) == (a, b)
    assert cut_around_join(a, b, 10) == (list(range(4, 10)), b)
    assert cut_around_join(a, b, 6) == (list(range(7, 10)), [100, 101, 102])
    assert cut_around_join(b, a, 6) == ([101, 102, 103], [0, 1, 2])
    assert cut_around_join(a, b, 0) == ([], [])


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
