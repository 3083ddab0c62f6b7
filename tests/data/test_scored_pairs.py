"""Scored sentence pairs: TSV with a header, JSONL, pairs without scores; one-line errors."""

from __future__ import annotations

import pytest

from attnkit.data.scored_pairs import read_scored_pairs
from attnkit.errors import DataError


def test_tsv_with_header_and_jsonl(tmp_path):
    tsv = tmp_path / "a.tsv"
    tsv.write_text("score\tsentence1\tsentence2\n5.0\tA man eats.\tA man is eating.\n"
                   "0.5\tA cat.\tA plane.\n", encoding="utf-8")  # fmt: skip
    pairs = read_scored_pairs(tsv)
    assert (pairs.first, pairs.second, pairs.scores) == (
        ["A man eats.", "A cat."],
        ["A man is eating.", "A plane."],
        [5.0, 0.5],
    )
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text('{"sentence1": "x y", "sentence2": "y x", "score": 1}\n', encoding="utf-8")
    assert read_scored_pairs(jsonl).scores == [1.0]


def test_pairs_without_scores(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_text("how old are you?\twhat is your age?\nhi\thello\n", encoding="utf-8")
    pairs = read_scored_pairs(path)
    assert pairs.scores is None and len(pairs) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5\ta\tb\nx\ta\tb\n", r"p.tsv:2: score 'x' is not a finite number"),
        ("5\ta\tb\nc\td\n", "pair 2 lacks a score"),
        ("5\ta\t \n", "p.tsv:1: empty sentence"),
        ("a\tb\tc\td\n", "p.tsv:1: expected score<TAB>sentence1<TAB>sentence2"),
        ("", "file is empty"),
    ],
)
def test_bad_files_name_the_line(tmp_path, text, message):
    path = tmp_path / "p.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        read_scored_pairs(path)
