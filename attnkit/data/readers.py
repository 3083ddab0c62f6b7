"""Readers for plain-text corpora: aligned parallel files, two-column TSV, raw text.

Every problem raises ``DataError`` with a one-line message that names the file
and, where it helps, the line (``train.de:17: empty line; ...``), so the CLI can
print it without a traceback. Files and standard input are read through
``attnkit.data.bounded`` (a ceiling on a line's length and on a gzip's
expansion, linear time); a name ending in ``.gz`` is read through gzip.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from attnkit.data import bounded
from attnkit.errors import DataError

_BOM = "\ufeff"


@dataclass
class ParallelCorpus:
    """Sentence pairs plus how many pairs were dropped because a side was empty.

    Behaves like a list of ``(src, tgt)`` pairs (``len``, iteration, indexing).
    """

    pairs: list[tuple[str, str]] = field(default_factory=list)
    dropped_empty: int = 0

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.pairs)

    def __getitem__(self, i: int) -> tuple[str, str]:
        return self.pairs[i]

    @property
    def sources(self) -> list[str]:
        return [s for s, _ in self.pairs]

    @property
    def targets(self) -> list[str]:
        return [t for _, t in self.pairs]


def check_readable(p: Path) -> None:
    """A ``DataError`` naming ``p`` unless it is an existing file (not a directory)."""
    if not p.exists():
        blocker = _file_in_the_way(p)
        if blocker is not None:
            raise DataError(
                f"{blocker}: is a file, not a directory, so {p} cannot exist; "
                "check the path (and data.dir in a run config)"
            )
        raise DataError(f"{p}: file not found; check the path (and data.dir in a run config)")
    if p.is_dir():
        raise DataError(f"{p}: is a directory, expected a text file")
    kind = endless_device(p)
    if kind is not None:
        raise DataError(f"{p}: is a {kind} device, not a text file")


def endless_device(path: str | Path) -> str | None:
    """``"character"`` or ``"block"`` when ``path`` is a device a reader must not read to
    its end (``/dev/zero``, ``/dev/urandom``, a disk: it would fill memory), else ``None``.
    ``/dev/null`` (empty) and a terminal (ends at Ctrl-D) are fine, as are FIFOs."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) or os.path.realpath(path) == os.devnull:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None  # the read will fail and say why
    try:
        return _device_kind(os.fstat(fd).st_mode, fd)
    finally:
        os.close(fd)


def _device_kind(mode: int, fd: int) -> str | None:
    if os.isatty(fd) or not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
        return None
    if os.path.samestat(os.fstat(fd), os.stat(os.devnull)):
        return None
    return "character" if stat.S_ISCHR(mode) else "block"


def _stdin_device() -> str | None:
    """``endless_device`` of standard input (``attnkit classify < /dev/zero``)."""
    try:
        fd = sys.stdin.fileno()
        return _device_kind(os.fstat(fd).st_mode, fd)
    except (OSError, ValueError, AttributeError):  # no real descriptor (tests, closed)
        return None


def read_document(path: str | Path) -> str:
    """A whole UTF-8 document such as a tokenizer JSON (BOM removed), with no line
    ceiling: JSON is often one long line. Not for corpora, which ``read_lines`` and
    ``read_text`` read under ``bounded``'s ceilings. DataError for every failure."""
    p = Path(path)
    check_readable(p)
    try:
        data = p.read_bytes()
    except PermissionError:
        raise DataError(f"{p}: permission denied; check the file's permissions") from None
    except OSError as e:
        raise DataError(f"{p}: cannot read the file ({e.strerror or e})") from None
    if not data.strip(b"\xef\xbb\xbf\r\n"):
        raise DataError(f"{p}: file is empty; expected one sentence per line")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(
            f"{p}:{line}: not valid UTF-8 (byte {e.start}); convert the file to UTF-8"
        ) from None
    return text.removeprefix(_BOM)


def open_checked(path: str | Path) -> bounded.Stream:
    """``path`` checked (``check_readable``) and opened for bounded reading, through gzip
    if its name ends in ``.gz``; the caller closes it."""
    p = Path(path)
    check_readable(p)
    return bounded.open_input(p)


def iter_decoded(path: str | Path, *, check_empty: bool = True) -> Iterator[tuple[int, str]]:
    """``(number of the first line, text)`` blocks of a UTF-8 file, plain or gzip, read
    under ``bounded``'s ceilings (``bounded.decoded_blocks``).

    Each block but the last ends with ``"\\n"``; ``"\\r\\n"`` becomes ``"\\n"`` and
    the leading BOM is dropped. With ``check_empty``, a file with no text is a ``DataError``.
    """
    stream = open_checked(path)
    try:
        yield from bounded.decoded_blocks(path, stream, check_empty=check_empty)
    finally:
        stream.close()


def iter_line_blocks(
    path: str | Path, *, check_empty: bool = True
) -> Iterator[tuple[int, list[str]]]:
    """``(number of the first line, lines)`` blocks of a file (``bounded.line_blocks``):
    split on ``"\\n"`` only (U+2028 and friends can occur inside a sentence), without
    their line endings."""
    stream = open_checked(path)
    try:
        yield from bounded.line_blocks(path, stream, check_empty=check_empty)
    finally:
        stream.close()


def _file_in_the_way(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` if it is a file (e.g. data.dir names a file)."""
    for parent in path.parents:
        if parent.exists():
            return parent if not parent.is_dir() else None
    return None


def read_lines(path: str | Path, *, check_empty: bool = True) -> list[str]:
    """One string per line of a UTF-8 file, plain or gzip (no line endings, no BOM);
    with ``check_empty``, a file with no text is a ``DataError``."""
    return [line for _, block in iter_line_blocks(path, check_empty=check_empty) for line in block]


def read_input_lines(path: str | Path | None) -> list[str]:
    """``read_lines(path)``, or the lines of standard input when ``path`` is ``None``
    (the commands' ``--input`` default), read the same way: bounded, no line endings,
    no BOM."""
    if path is not None:
        return read_lines(path)
    kind = _stdin_device()
    if kind is not None:
        raise DataError(f"<stdin>: is a {kind} device, not text; redirect a file or a pipe")
    blocks = bounded.line_blocks("<stdin>", bounded.stdin_binary(), check_empty=False)
    return [line for _, block in blocks for line in block]


def read_text(path: str | Path) -> str:
    """A whole UTF-8 text file, plain or gzip (BOM removed, CRLF turned into LF), for
    language-model corpora."""
    return "".join(text for _, text in iter_decoded(path))


def empty_line_error(path: Path, line: int) -> DataError:
    """The error for a pair with an empty side at ``path:line``."""
    return DataError(
        f"{path}:{line}: empty line; remove it, or drop such pairs with data.skip_empty: true "
        "(attnkit train) or --skip-empty (attnkit evaluate)"
    )


def read_parallel(
    src_path: str | Path, tgt_path: str | Path, *, skip_empty: bool = False
) -> ParallelCorpus:
    """Aligned files, one sentence per line; line i of ``tgt_path`` translates line i of the source.

    A line that is empty (or only whitespace) on either side is an error unless
    ``skip_empty``; then the pair is dropped and counted in ``dropped_empty``.
    """
    src_p, tgt_p = Path(src_path), Path(tgt_path)
    src, tgt = read_lines(src_p), read_lines(tgt_p)
    if len(src) != len(tgt):
        raise DataError(
            f"{src_p} has {len(src)} lines but {tgt_p} has {len(tgt)}; "
            "parallel files must have one sentence per line on both sides"
        )
    corpus = ParallelCorpus()
    for i, (s, t) in enumerate(zip(src, tgt), start=1):
        if not s.strip() or not t.strip():
            if not skip_empty:
                raise empty_line_error(src_p if not s.strip() else tgt_p, i)
            corpus.dropped_empty += 1
            continue
        corpus.pairs.append((s, t))
    return corpus


def read_tsv(path: str | Path, *, skip_empty: bool = False) -> ParallelCorpus:
    """Pairs from a two-column, tab-separated UTF-8 file: ``source<TAB>target`` per line.

    Empty sides are handled as in ``read_parallel``.
    """
    p = Path(path)
    corpus = ParallelCorpus()
    for i, line in enumerate(read_lines(p), start=1):
        cols = line.split("\t")
        if not line.strip():
            cols = ["", ""]  # a blank line is an empty pair, not a column-count error
        if len(cols) != 2:
            raise DataError(
                f"{p}:{i}: expected 2 tab-separated columns (source, target), got {len(cols)}"
            )
        s, t = cols
        if not s.strip() or not t.strip():
            if not skip_empty:
                raise empty_line_error(p, i)
            corpus.dropped_empty += 1
            continue
        corpus.pairs.append((s, t))
    return corpus
