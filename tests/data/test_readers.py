"""Readers: every file problem is a one-line DataError naming the file (and line)."""

from __future__ import annotations

import builtins
import pathlib
from pathlib import Path

import pytest

from attnkit.data.readers import (
    read_document,
    read_input_lines,
    read_lines,
    read_parallel,
    read_text,
    read_tsv,
)
from attnkit.errors import DataError


def write(path: Path, data: str | bytes) -> Path:
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


def pair(tmp_path: Path, src: str | bytes, tgt: str | bytes) -> tuple[Path, Path]:
    return write(tmp_path / "train.en", src), write(tmp_path / "train.de", tgt)


def test_reads_aligned_pairs(tmp_path: Path) -> None:
    src, tgt = pair(tmp_path, "a cat\nTwo dogs.\n", "eine Katze\nZwei Hunde.\n")
    corpus = read_parallel(src, tgt)
    assert corpus.pairs == [("a cat", "eine Katze"), ("Two dogs.", "Zwei Hunde.")]
    assert corpus.dropped_empty == 0
    assert len(corpus) == 2 and list(corpus)[1] == ("Two dogs.", "Zwei Hunde.")


def test_bom_crlf_and_missing_final_newline(tmp_path: Path) -> None:
    src, tgt = pair(tmp_path, "\ufeffHello\r\nWorld", b"\xef\xbb\xbfHallo\r\nWelt\r\n")
    assert read_parallel(src, tgt).pairs == [("Hello", "Hallo"), ("World", "Welt")]


def test_unicode_line_separators_do_not_split_lines(tmp_path: Path) -> None:
    # str.splitlines() would break these lines in two and misalign the corpus.
    path = write(tmp_path / "x.txt", "a\u2028b\nc\x85d\n")
    assert read_lines(path) == ["a\u2028b", "c\x85d"]


def test_input_lines_come_from_a_file_or_from_stdin(tmp_path, monkeypatch) -> None:
    import io

    path = write(tmp_path / "in.txt", "\ufeffone\r\ntwo\n")
    monkeypatch.setattr("sys.stdin", io.StringIO("\ufeffone\r\ntwo\n"))
    assert read_input_lines(path) == read_input_lines(None) == ["one", "two"]
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert read_input_lines(None) == []


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.en: file not found"):
        read_parallel(tmp_path / "nope.en", tmp_path / "nope.de")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    (tmp_path / "corpus.de").mkdir()
    src = write(tmp_path / "corpus.en", "x\n")
    with pytest.raises(DataError, match=r"corpus\.de: is a directory"):
        read_parallel(src, tmp_path / "corpus.de")


def test_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "secret.txt", "x\n")

    # chmod 000 does not stop root (CI containers), so simulate the OS error.
    def deny(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    real_open = builtins.open

    def open_file(file, *args, **kwargs):  # the bounded reader opens files itself
        if isinstance(file, str | Path) and Path(file) == path:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_bytes", deny)
    monkeypatch.setattr(builtins, "open", open_file)
    for read in (read_text, read_lines, read_document):
        with pytest.raises(DataError, match=r"secret\.txt: permission denied"):
            read(path)


@pytest.mark.parametrize("content", [b"", b"\n\n", b"\xef\xbb\xbf"])
def test_empty_file(tmp_path: Path, content: bytes) -> None:
    src, tgt = pair(tmp_path, "x\n", content)
    with pytest.raises(DataError, match=r"train\.de: file is empty"):
        read_parallel(src, tgt)


def test_invalid_utf8_names_line(tmp_path: Path) -> None:
    src, tgt = pair(tmp_path, "a\nb\nc\n", b"a\nb\n\xe4rger\n")  # Latin-1 "ärger"
    with pytest.raises(DataError, match=r"train\.de:3: not valid UTF-8") as err:
        read_parallel(src, tgt)
    assert "\n" not in str(err.value)


def test_mismatched_line_counts(tmp_path: Path) -> None:
    src, tgt = pair(tmp_path, "a\nb\nc\n", "a\nb\n")
    with pytest.raises(DataError) as err:
        read_parallel(src, tgt)
    msg = str(err.value)
    assert "train.en has 3 lines" in msg and "train.de has 2" in msg


def test_empty_line_is_error_naming_file_and_line(tmp_path: Path) -> None:
    src, tgt = pair(tmp_path, "a\nb\nc\n", "a\n  \nc\n")
    with pytest.raises(DataError, match=r"train\.de:2: empty line.*skip_empty"):
        read_parallel(src, tgt)


def test_skip_empty_drops_and_counts(tmp_path: Path) -> None:
    src, tgt = pair(tmp_path, "a\n\nc\nd\n", "A\nB\nC\n\n")
    corpus = read_parallel(src, tgt, skip_empty=True)
    assert corpus.pairs == [("a", "A"), ("c", "C")]
    assert corpus.dropped_empty == 2


def test_tsv(tmp_path: Path) -> None:
    path = write(tmp_path / "train.tsv", "\ufeffa cat\teine Katze\r\nTwo\tZwei\n")
    assert read_tsv(path).pairs == [("a cat", "eine Katze"), ("Two", "Zwei")]


def test_tsv_wrong_column_count_names_line(tmp_path: Path) -> None:
    path = write(tmp_path / "train.tsv", "a\tb\nc\td\te\n")
    with pytest.raises(DataError, match=r"train\.tsv:2: expected 2 tab-separated columns.*got 3"):
        read_tsv(path)


def test_tsv_empty_side(tmp_path: Path) -> None:
    path = write(tmp_path / "train.tsv", "a\tb\nc\t\n\nd\te\n")
    with pytest.raises(DataError, match=r"train\.tsv:2: empty line"):
        read_tsv(path)
    corpus = read_tsv(path, skip_empty=True)
    assert corpus.pairs == [("a", "b"), ("d", "e")] and corpus.dropped_empty == 2


def test_read_text(tmp_path: Path) -> None:
    path = write(tmp_path / "lm.txt", "\ufeffline one\r\nline two\r\n")
    assert read_text(path) == "line one\nline two\n"
    with pytest.raises(DataError, match=r"lm2\.txt: file not found"):
        read_text(tmp_path / "lm2.txt")
