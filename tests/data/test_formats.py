"""Streaming readers: JSONL, gzip, TSV, several files per split; line-numbered errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from attnkit.data import bounded, formats
from attnkit.data.formats import (
    iter_line_blocks,
    iter_pair_chunks,
    iter_text_pieces,
    pair_inputs,
    read_pairs,
    text_inputs,
    text_lines,
)
from attnkit.data.readers import read_parallel, read_text
from attnkit.errors import DataError

PAIRS = [("ein Hund", "a dog"), ("zwei Katzen", "two cats"), ("ein Haus", "a house")]


def write(path: Path, text: str | bytes) -> Path:
    data = text.encode("utf-8") if isinstance(text, str) else text
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def jsonl(pairs: list[tuple[str, str]]) -> str:
    return "".join(
        json.dumps({"src": s, "tgt": t, "id": i}) + "\n" for i, (s, t) in enumerate(pairs)
    )


def pairs_of(tmp_path: Path, entries: str | list[str], **kw: bool) -> list[tuple[str, str]]:
    return read_pairs(pair_inputs(tmp_path, entries, "de", "en"), skip_empty=False, **kw).pairs


def test_every_format_and_compression_reads_the_same_pairs(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", jsonl(PAIRS))
    write(tmp_path / "b.jsonl.gz", jsonl(PAIRS))
    write(tmp_path / "c.tsv.gz", "".join(f"{s}\t{t}\n" for s, t in PAIRS))
    write(tmp_path / "d.de.gz", "".join(s + "\n" for s, _ in PAIRS))
    write(tmp_path / "d.en", "".join(t + "\n" for _, t in PAIRS))  # one side compressed
    for entry in ("a.jsonl", "b.jsonl.gz", "c.tsv.gz", "d"):
        assert pairs_of(tmp_path, entry) == PAIRS, entry
    # Several inputs per split, in order; a glob expands sorted.
    assert pairs_of(tmp_path, ["d", "a.jsonl"]) == PAIRS + PAIRS
    assert pairs_of(tmp_path, "*.jsonl*") == PAIRS + PAIRS


def test_streaming_matches_the_in_memory_reader_in_chunks(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(formats, "CHUNK_LINES", 7)
    monkeypatch.setattr(bounded, "BLOCK_BYTES", 16)  # blocks cut mid-line and mid-character
    src = [f"Satz {i} ü \u2028 x" for i in range(50)]
    tgt = [f"sentence {i}" + " long" * (i % 5) for i in range(50)]
    write(tmp_path / "t.de", "\ufeff" + "\r\n".join(src))  # BOM, CRLF, no final newline
    write(tmp_path / "t.en", "\n".join(tgt) + "\n")
    chunks = list(iter_pair_chunks(pair_inputs(tmp_path, "t", "de", "en"), skip_empty=False))
    assert max(len(c) for c in chunks) <= 7 and len(chunks) > 5
    got = [p for c in chunks for p in zip(c.src, c.tgt)]
    assert got == read_parallel(tmp_path / "t.de", tmp_path / "t.en").pairs == list(zip(src, tgt))


TWO = '{"src": "a", "tgt": "b"}\n'  # a good first record


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("x.jsonl", TWO + '{"src": "a", tgt: 1}\n', r"x\.jsonl:2: not valid JSON"),
        ("x.jsonl.gz", TWO + '{"src": "a"}\n', r'x\.jsonl\.gz:2: "tgt" must be a string, got mis'),
        ("x.jsonl", '{"src": "a", "tgt": 3}\n', r'x\.jsonl:1: "tgt" must be a string, got a int'),
        ("x.jsonl", '["a", "b"]\n', r'x\.jsonl:1: expected a JSON object with "src" and "tgt"'),
        ("x.jsonl", TWO + '{"src": " ", "tgt": "b"}\n', r"x\.jsonl:2: empty line"),
        ("x.tsv.gz", "a\tb\na\tb\tc\n", r"x\.tsv\.gz:2: expected 2 tab-separated columns"),
        ("x.tsv.gz", b"a\tb\n\xe4\tb\n", r"x\.tsv\.gz:2: not valid UTF-8"),
        ("x.tsv.gz", b"", r"x\.tsv\.gz: file is empty"),
    ],
)  # fmt: skip
def test_malformed_records_name_file_and_line(tmp_path, name, content, message) -> None:
    write(tmp_path / name, content)
    with pytest.raises(DataError, match=message) as err:
        pairs_of(tmp_path, name)
    assert "\n" not in str(err.value)


def test_broken_gzip_and_missing_files_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "x.tsv.gz").write_bytes(gzip.compress(b"a\tb\n" * 100)[:-20])  # truncated
    with pytest.raises(DataError, match=r"x\.tsv\.gz: not a valid gzip file"):
        pairs_of(tmp_path, "x.tsv.gz")
    (tmp_path / "y.tsv.gz").write_bytes(b"not gzip at all\n")
    with pytest.raises(DataError, match=r"y\.tsv\.gz: not a valid gzip file"):
        pairs_of(tmp_path, "y.tsv.gz")
    with pytest.raises(DataError, match=r"nope\.de: file not found"):
        pairs_of(tmp_path, "nope")
    with pytest.raises(DataError, match=r"shard-\*\.jsonl: no file matches"):
        pairs_of(tmp_path, "shard-*.jsonl")


def test_aligned_files_must_have_as_many_lines(tmp_path: Path) -> None:
    write(tmp_path / "t.de", "a\nb\nc\n")
    write(tmp_path / "t.en.gz", "a\nb\n")
    with pytest.raises(DataError, match=r"t\.de has 3 lines but .*t\.en\.gz has 2"):
        pairs_of(tmp_path, "t")


def test_empty_pairs_are_dropped_and_counted_when_asked(tmp_path: Path) -> None:
    write(tmp_path / "t.jsonl", jsonl([("a", "b"), ("", "x"), ("c", "  "), ("d", "e")]))
    inputs = pair_inputs(tmp_path, "t.jsonl", "de", "en")
    corpus = read_pairs(inputs, skip_empty=True)
    assert corpus.pairs == [("a", "b"), ("d", "e")] and corpus.dropped_empty == 2
    with pytest.raises(DataError, match=r"t\.jsonl:2: empty line"):
        read_pairs(inputs, skip_empty=False)


def test_text_pieces_and_lines_give_the_text_back_exactly(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bounded, "BLOCK_BYTES", 32)
    text = "\ufeffFirst Citizen:\r\nBefore we proceed, hear me speak.\n\nAll: Speak, speak.\n" * 9
    path = write(tmp_path / "input.txt", text)
    exact = read_text(path)
    inputs = text_inputs(tmp_path, "input.txt")
    pieces = list(iter_text_pieces(inputs, piece_chars=40))
    assert "".join(pieces) == exact and len(pieces) > 5
    assert all(p.startswith(" ") for p in pieces[1:])  # cut before a space: a word boundary
    assert [x for b in text_lines(inputs) for x in b] == exact.split("\n")
    # JSONL {"text"} records are lines of one text; several files are joined.
    write(tmp_path / "docs.jsonl.gz", "".join(json.dumps({"text": t}) + "\n" for t in ["a b", "c"]))
    both = text_inputs(tmp_path, ["docs.jsonl.gz", "input.txt"])
    assert "".join(iter_text_pieces(both)) == "a b\nc\n" + exact
    write(tmp_path / "bad.jsonl", '{"text": "a"}\n{"txt": "b"}\n')
    with pytest.raises(DataError, match=r'bad\.jsonl:2: "text" must be a string'):
        list(iter_text_pieces(text_inputs(tmp_path, "bad.jsonl")))


def test_line_blocks_number_their_first_line(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bounded, "BLOCK_BYTES", 8)
    path = write(tmp_path / "x.txt", "".join(f"line {i}\n" for i in range(1, 21)))
    for first, lines in iter_line_blocks(path):
        assert lines[0] == f"line {first}"
