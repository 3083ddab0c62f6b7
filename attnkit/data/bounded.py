"""Bounded reading of text input: the one way attnkit reads a user's text, file or stdin.

Every reader (``readers.py``: test sets, ``evaluate``, ``classify``;
``formats.py``: aligned files, TSV, JSONL, LM text, prepared and streamed
corpora; standard input of ``translate`` and ``classify``) goes through
``decoded_blocks`` here, which promises three things:

* **A ceiling on a line's length**: a line over ``max_line_bytes()`` bytes
  (default 1 MiB; ``ATTNKIT_MAX_LINE_BYTES`` changes it) is a one-line
  ``DataError`` naming the file and the line, raised as soon as the ceiling is
  passed, before the rest of the line is read. No sentence, record or LM
  line is that long; a file with no newline at all (a 1 GiB "line") is not
  text this toolkit can train on, and handing it to a tokenizer trainer
  ends in a native abort.
* **A ceiling on expansion** for compressed input (``.gz``): once more than
  ``EXPANSION_FLOOR`` bytes came out, the bytes out may be at most
  ``max_expansion()`` times (default 100; ``ATTNKIT_MAX_EXPANSION``) the
  compressed bytes read so far. Text compresses 3 to 10 times; a gzip bomb
  (about 1,000 times) is refused in one line naming the file, after reading
  a bounded prefix of it.
* **Linear time and bounded memory**: the input is read ``BLOCK_BYTES`` at a
  time; the unfinished line carried from one block to the next is at most
  the ceiling, so nothing is copied more than a bounded number of times.

Blocks are cut at a newline, so a UTF-8 character is never cut in two.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np

from attnkit.errors import DataError, UsageError

LINE_ENV = "ATTNKIT_MAX_LINE_BYTES"
EXPANSION_ENV = "ATTNKIT_MAX_EXPANSION"
DEFAULT_MAX_LINE_BYTES = 1 << 20  # 1 MiB: a long paragraph is a few KB
DEFAULT_MAX_EXPANSION = 100  # text gzips 3-10x; deflate's own maximum is about 1,032x
EXPANSION_FLOOR = 64 << 20  # a file that expands to less is harmless, whatever its ratio
BLOCK_BYTES = 1 << 22  # bytes read at a time (4 MiB)
_BOM = "\ufeff"
_NEWLINE = 10


class Readable(Protocol):
    """What the readers read from: a file, a gzip stream, standard input's bytes."""

    def read(self, n: int, /) -> bytes: ...


def _positive_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip().replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"{name}: expected a positive whole number, got {raw!r}")
    return value


def max_line_bytes() -> int:
    """The longest line a reader accepts, in bytes (``ATTNKIT_MAX_LINE_BYTES``)."""
    return _positive_env(LINE_ENV, DEFAULT_MAX_LINE_BYTES)


def max_expansion() -> int:
    """How many times its compressed size a ``.gz`` input may expand (``ATTNKIT_MAX_EXPANSION``)."""
    return _positive_env(EXPANSION_ENV, DEFAULT_MAX_EXPANSION)


def long_line_error(name: str | Path, line: int, limit: int) -> DataError:
    """The error for line ``line`` of ``name`` passing ``limit`` bytes."""
    return DataError(
        f"{name}:{line}: line longer than {limit:,} bytes (is this a text file with one "
        f"sentence per line?); split it, or raise {LINE_ENV}"
    )


class _Counting:
    """A binary file that counts the bytes read from it (the compressed side of a gzip)."""

    def __init__(self, raw: BinaryIO):
        self.raw, self.count = raw, 0
        self.mode = "rb"

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.count += len(data)
        return data

    def close(self) -> None:
        self.raw.close()


class _GuardedGzip:
    """A gzip stream that refuses to expand past ``max_expansion()`` its compressed bytes."""

    def __init__(self, path: Path, raw: BinaryIO):
        self.path, self.raw = path, _Counting(raw)
        self.gz = gzip.GzipFile(fileobj=self.raw, mode="rb")  # type: ignore[call-overload]
        self.ratio, self.out = max_expansion(), 0

    def read(self, n: int) -> bytes:
        try:
            data = self.gz.read(n)
        except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
            raise DataError(f"{self.path}: not a valid gzip file ({e})") from None
        self.out += len(data)
        if self.out > EXPANSION_FLOOR and self.out > self.ratio * self.raw.count:
            raise DataError(
                f"{self.path}: expands more than {self.ratio} times its compressed size "
                f"({self.out:,} bytes from {self.raw.count:,}; a gzip bomb?); "
                f"not reading on (raise {EXPANSION_ENV} if the file is genuine)"
            )
        return data

    def close(self) -> None:
        self.gz.close()
        self.raw.close()


class _Plain:
    """A plain file whose read errors name it."""

    def __init__(self, path: Path, raw: BinaryIO):
        self.path, self.raw = path, raw

    def read(self, n: int) -> bytes:
        try:
            return self.raw.read(n)
        except OSError as e:
            raise DataError(f"{self.path}: cannot read the file ({e.strerror or e})") from None

    def close(self) -> None:
        self.raw.close()


class Stream(Readable, Protocol):
    """An opened input (``open_input``)."""

    def close(self) -> None: ...


def open_input(path: Path) -> Stream:
    """``path`` opened for bounded reading, through gzip if its name ends in ``.gz``.

    The caller has checked the path (``readers.check_readable``); the caller closes it.
    """
    try:
        raw: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed by the caller
    except PermissionError:
        raise DataError(f"{path}: permission denied; check the file's permissions") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read the file ({e.strerror or e})") from None
    if path.name.endswith(".gz"):
        try:
            return _GuardedGzip(path, raw)
        except BaseException:
            raw.close()
            raise
    return _Plain(path, raw)


def stdin_binary() -> BinaryIO:
    """Standard input as bytes (a test's ``io.StringIO`` stand-in is encoded)."""
    if sys.stdin is None:  # started with standard input closed (`<&-`)
        raise DataError("<stdin>: standard input is closed; give --input or redirect a file")
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        return buffer
    return io.BytesIO(sys.stdin.read().encode("utf-8"))


def _check_lines(name: str | Path, block: bytes, head: int, lineno: int, limit: int) -> None:
    """Raise if a line of ``block`` (ending in a newline) is over ``limit`` bytes; its first
    line continues ``head`` bytes carried from the blocks before."""
    if len(block) + head <= limit:
        return
    ends = np.flatnonzero(np.frombuffer(block, np.uint8) == _NEWLINE)
    starts = np.concatenate(([-1 - head], ends[:-1]))
    lengths = ends - starts - 1  # without the newline
    over = np.flatnonzero(lengths > limit)
    if len(over):
        raise long_line_error(name, lineno + int(over[0]), limit)


def decoded_blocks(
    name: str | Path, stream: Readable, *, check_empty: bool = True
) -> Iterator[tuple[int, str]]:
    """``(number of the first line, text)`` blocks of UTF-8 ``stream``, read boundedly.

    Each block but the last ends with ``"\\n"``; ``"\\r\\n"`` becomes ``"\\n"`` and
    the leading BOM is dropped. A line over ``max_line_bytes()`` is a ``DataError``
    naming ``name`` and the line; with ``check_empty``, so is a stream with no text.
    """
    limit = max_line_bytes()
    lineno, offset, seen_text = 1, 0, False
    carried: list[bytes] = []  # the unfinished line: at most ``limit`` bytes in all
    head = 0
    while True:
        piece = stream.read(BLOCK_BYTES)
        if not piece:
            break
        cut = piece.rfind(b"\n") + 1
        if cut == 0:
            carried.append(piece)
            head += len(piece)
            if head > limit:
                raise long_line_error(name, lineno, limit)
            continue
        lines, rest = piece[:cut], piece[cut:]
        _check_lines(name, lines, head, lineno, limit)
        block = b"".join([*carried, lines])
        if len(rest) > limit:
            raise long_line_error(name, lineno + block.count(b"\n"), limit)
        carried, head = ([rest], len(rest)) if rest else ([], 0)
        seen_text = seen_text or bool(block.strip(b"\xef\xbb\xbf\r\n"))
        text = _decode(name, block, lineno, offset)
        yield lineno, text.removeprefix(_BOM) if lineno == 1 else text
        lineno += block.count(b"\n")
        offset += len(block)
    if carried:
        rest = b"".join(carried)
        seen_text = seen_text or bool(rest.strip(b"\xef\xbb\xbf\r\n"))
        text = _decode(name, rest, lineno, offset)
        yield lineno, text.removeprefix(_BOM) if lineno == 1 else text
    if check_empty and not seen_text:
        raise DataError(f"{name}: file is empty; expected one sentence per line")


def line_blocks(
    name: str | Path, stream: Readable, *, check_empty: bool = True
) -> Iterator[tuple[int, list[str]]]:
    """``(number of the first line, lines)`` blocks of ``stream`` (``decoded_blocks``).

    Lines are split on ``"\\n"`` only (U+2028 and friends can occur inside a
    sentence), without their line endings.
    """
    for first, text in decoded_blocks(name, stream, check_empty=check_empty):
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()  # the block's final newline, not an extra empty line
        else:
            lines[-1] = lines[-1].removesuffix("\r")  # the last line, no newline
        yield first, lines


def _decode(name: str | Path, block: bytes, lineno: int, offset: int) -> str:
    try:
        return block.decode("utf-8").replace("\r\n", "\n")
    except UnicodeDecodeError as e:
        line = lineno + block.count(b"\n", 0, e.start)
        raise DataError(
            f"{name}:{line}: not valid UTF-8 (byte {offset + e.start}); convert the file to UTF-8"
        ) from None


def check_text_lengths(texts: list[str], what: str) -> None:
    """A ``DataError`` if a text handed to a tokenizer trainer is over the line ceiling
    (in characters, which never exceed bytes): the readers bound every line, so this
    only fires for text that came another way, and keeps the native trainer safe."""
    limit = max_line_bytes()
    for i, text in enumerate(texts, start=1):
        if len(text) > limit:
            raise DataError(
                f"{what}: text {i} is {len(text):,} characters, over the {limit:,}-byte line "
                f"ceiling for tokenizer training; split it, or raise {LINE_ENV}"
            )
