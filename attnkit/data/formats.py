"""Streaming readers for training corpora of any size: aligned files, TSV, JSONL, gzip.

``readers.py`` reads a whole file into memory (test sets, ``attnkit
evaluate``); these readers go through a corpus in blocks of lines, so a
corpus larger than memory can be prepared or streamed. One split may list
several inputs (``data.train: [a.jsonl.gz, b.tsv, europarl]``); each is

* ``NAME.jsonl`` / ``NAME.jsonl.gz``: one JSON object per line,
  ``{"src": ..., "tgt": ...}`` for translation, or ``{"text": ..., "summary": ...}``
  (a summarization corpus: the text is the source, its summary the target),
  ``{"text": ...}`` for the language-model tasks (other fields are ignored);
* ``NAME.tsv`` / ``NAME.tsv.gz``: ``source<TAB>target`` per line;
* anything else: aligned files ``NAME.{src_lang}`` and ``NAME.{tgt_lang}``
  (each may be gzip-compressed, ``NAME.de.gz``); for the LM tasks, a plain
  text file.

An entry with ``*``/``?``/``[`` is a glob (``shard-*.jsonl.gz``, sorted).
A name ending in ``.gz`` is read through gzip. Every file is read through
``bounded`` (a ceiling on a line's length and on a gzip's expansion, linear
time). Every problem is a one-line
``DataError`` naming the file and line, with the same wording as
``readers.py`` (``train.de:17: empty line; ...``).

Shapes: a ``PairChunk`` holds up to ``CHUNK_LINES`` pairs.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from attnkit.data.readers import (
    ParallelCorpus,
    empty_line_error,
    iter_decoded,
    iter_line_blocks,
)
from attnkit.errors import DataError

CHUNK_LINES = 50_000  # pairs handed on at a time
Kind = Literal["aligned", "tsv", "jsonl", "text"]


def _is_blank(s: str) -> bool:
    return not s or s.isspace()  # == not s.strip(), without building a copy


@dataclass
class PairChunk:
    """Consecutive pairs of one input (empty ones dropped and counted)."""

    src: list[str] = field(default_factory=list)
    tgt: list[str] = field(default_factory=list)
    dropped_empty: int = 0

    def __len__(self) -> int:
        return len(self.src)


@dataclass(frozen=True)
class Input:
    """One input of a split: aligned files, a TSV file, a JSONL file or a text file."""

    kind: Kind
    paths: tuple[Path, ...]

    def __str__(self) -> str:
        return " + ".join(str(p) for p in self.paths)


def _expand(base: Path, entry: str) -> list[Path]:
    if any(c in entry for c in "*?["):
        found = sorted(Path(p) for p in glob.glob(str(base / entry)))
        if not found:
            raise DataError(f"{base / entry}: no file matches this pattern")
        return found
    return [base / entry]


def _with_gz(path: Path) -> Path:
    """``path``, or ``path.gz`` when only the compressed file is there."""
    gz = path.with_name(path.name + ".gz")
    return gz if not path.exists() and gz.exists() else path


def _kind(path: Path) -> Kind | None:
    name = path.name.removesuffix(".gz")
    if name.endswith(".jsonl"):
        return "jsonl"
    if name.endswith(".tsv"):
        return "tsv"
    return None


def pair_inputs(
    base: str | Path, entries: str | Sequence[str], src_lang: str, tgt_lang: str
) -> list[Input]:
    """The inputs a split names (``data.train``: one entry or a list), relative to ``base``."""
    names = [entries] if isinstance(entries, str) else list(entries)
    inputs: list[Input] = []
    for entry in names:
        for path in _expand(Path(base), entry):
            kind = _kind(path)
            if kind is not None:
                inputs.append(Input(kind, (path,)))
            else:
                src = _with_gz(path.with_name(f"{path.name}.{src_lang}"))
                tgt = _with_gz(path.with_name(f"{path.name}.{tgt_lang}"))
                inputs.append(Input("aligned", (src, tgt)))
    if not inputs:
        raise DataError(f"{base}: the split names no input files")
    return inputs


def text_inputs(base: str | Path, entries: str | Sequence[str]) -> list[Input]:
    """The inputs of a language-model corpus (``data.text``): text or ``{"text"}`` JSONL."""
    names = [entries] if isinstance(entries, str) else list(entries)
    inputs = []
    for entry in names:
        for path in _expand(Path(base), entry):
            inputs.append(Input("jsonl" if _kind(path) == "jsonl" else "text", (path,)))
    return inputs


# -- pairs ---------------------------------------------------------------------------


def iter_pair_chunks(inputs: Sequence[Input], *, skip_empty: bool) -> Iterator[PairChunk]:
    """Every pair of ``inputs`` in order, in chunks of up to ``CHUNK_LINES``.

    A pair with an empty side is a ``DataError`` naming file and line, or,
    with ``skip_empty``, dropped and counted in its chunk's ``dropped_empty``.
    """
    for item in inputs:
        if item.kind == "aligned":
            yield from _aligned(*item.paths, skip_empty=skip_empty)
        elif item.kind == "tsv":
            yield from _records(item.paths[0], _tsv_pair, skip_empty)
        elif item.kind == "jsonl":
            yield from _records(item.paths[0], _json_pair, skip_empty)
        else:
            raise DataError(f"{item}: not a parallel corpus")


def read_pairs(inputs: Sequence[Input], *, skip_empty: bool) -> ParallelCorpus:
    """All pairs of ``inputs`` in memory (a validation split, or ``data.loading: memory``)."""
    corpus = ParallelCorpus()
    for chunk in iter_pair_chunks(inputs, skip_empty=skip_empty):
        corpus.pairs.extend(zip(chunk.src, chunk.tgt))
        corpus.dropped_empty += chunk.dropped_empty
    return corpus


def _keep(
    chunk: PairChunk, s: str, t: str, skip_empty: bool, where: tuple[Path, Path], line: int
) -> None:
    if _is_blank(s) or _is_blank(t):
        if not skip_empty:
            raise empty_line_error(where[0] if _is_blank(s) else where[1], line)
        chunk.dropped_empty += 1
        return
    chunk.src.append(s)
    chunk.tgt.append(t)


def _aligned(src: Path, tgt: Path, *, skip_empty: bool) -> Iterator[PairChunk]:
    src_blocks, tgt_blocks = iter_line_blocks(src), iter_line_blocks(tgt)
    s_buf: list[str] = []
    t_buf: list[str] = []
    n_src = n_tgt = 0
    line = 1
    while True:
        for it, buf in ((src_blocks, s_buf), (tgt_blocks, t_buf)):
            while len(buf) < CHUNK_LINES:
                block = next(it, None)
                if block is None:
                    break
                buf.extend(block[1])
                if it is src_blocks:
                    n_src += len(block[1])
                else:
                    n_tgt += len(block[1])
        n = min(len(s_buf), len(t_buf), CHUNK_LINES)
        if n == 0:
            break
        chunk = PairChunk()
        for i in range(n):
            _keep(chunk, s_buf[i], t_buf[i], skip_empty, (src, tgt), line + i)
        del s_buf[:n], t_buf[:n]
        line += n
        yield chunk
    if n_src != n_tgt:
        raise DataError(
            f"{src} has {n_src} lines but {tgt} has {n_tgt}; "
            "parallel files must have one sentence per line on both sides"
        )


def _tsv_pair(path: Path, line: int, text: str) -> tuple[str, str]:
    if _is_blank(text):
        return "", ""  # a blank line is an empty pair, not a column-count error
    cols = text.split("\t")
    if len(cols) != 2:
        raise DataError(
            f"{path}:{line}: expected 2 tab-separated columns (source, target), got {len(cols)}"
        )
    return cols[0], cols[1]


# The key pairs a JSONL pair may use: translation's, then summarization's (the same task
# for an encoder-decoder: the text is translated into its summary).
PAIR_KEYS: tuple[tuple[str, str], ...] = (("src", "tgt"), ("text", "summary"))


def _json_record(
    path: Path, line: int, text: str, keys: tuple[str, ...], *, alternatives: str = ""
) -> list[str]:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{line}: not valid JSON ({e.msg}, column {e.colno})") from None
    fields = " and ".join(f'"{k}"' for k in keys) + alternatives
    if not isinstance(record, dict):
        raise DataError(f"{path}:{line}: expected a JSON object with {fields}")
    if alternatives and keys[0] not in record:  # a pair: the first key pair present
        keys = next((k for k in PAIR_KEYS if k[0] in record), keys)
    values = []
    for key in keys:
        value = record.get(key)
        if not isinstance(value, str):
            got = "missing" if value is None else f"a {type(value).__name__}"
            raise DataError(f'{path}:{line}: "{key}" must be a string, got {got}')
        values.append(value)
    return values


def _json_pair(path: Path, line: int, text: str) -> tuple[str, str]:
    if _is_blank(text):
        return "", ""
    others = " or ".join(" and ".join(f'"{k}"' for k in pair) for pair in PAIR_KEYS[1:])
    s, t = _json_record(path, line, text, PAIR_KEYS[0], alternatives=f" (or {others})")
    return s, t


def _records(
    path: Path, parse: Callable[[Path, int, str], tuple[str, str]], skip_empty: bool
) -> Iterator[PairChunk]:
    chunk = PairChunk()
    for first, lines in iter_line_blocks(path):
        for i, text in enumerate(lines, start=first):
            s, t = parse(path, i, text)
            _keep(chunk, s, t, skip_empty, (path, path), i)
            if len(chunk) >= CHUNK_LINES:
                yield chunk
                chunk = PairChunk()
    if len(chunk) or chunk.dropped_empty:
        yield chunk


# -- text (language-model corpora) ----------------------------------------------------


def json_texts(path: Path) -> Iterator[list[str]]:
    """The ``"text"`` of every record of a JSONL file, in blocks."""
    for first, lines in iter_line_blocks(path):
        yield [
            _json_record(path, i, t, ("text",))[0]
            for i, t in enumerate(lines, start=first)
            if not _is_blank(t)
        ]


def text_lines(inputs: Sequence[Input]) -> Iterator[list[str]]:
    """The lines of the corpus text (``iter_text_pieces``), split on ``"\\n"`` only:
    joined with ``"\\n"`` they give the text back exactly."""
    carry = ""
    for text in _texts(inputs):
        parts = (carry + text).split("\n")
        carry = parts.pop()
        if parts:
            yield parts
    yield [carry]


def iter_text_pieces(inputs: Sequence[Input], piece_chars: int = 1 << 22) -> Iterator[str]:
    """The corpus text in pieces that each start at a space when they can.

    One text file gives exactly ``readers.read_text``'s text; several are
    joined, each ending in ``"\\n"``; a JSONL record is one line. Encoding piece
    by piece gives the ids of encoding the whole text, because a space starts
    a new word-level pre-token in every tokenizer attnkit trains (Metaspace)
    or reads (byte-level BPE, SentencePiece); a piece of ``piece_chars`` with
    no space in its second half is cut anywhere (exact for characters).
    """
    pending = ""
    for text in _texts(inputs):
        pending += text
        while len(pending) >= piece_chars:
            cut = pending.rfind(" ", piece_chars // 2, piece_chars)
            cut = cut if cut > 0 else piece_chars
            yield pending[:cut]
            pending = pending[cut:]
    if pending:
        yield pending


def _texts(inputs: Sequence[Input]) -> Iterator[str]:
    for n, item in enumerate(inputs):
        last = ""
        if item.kind == "jsonl":
            for lines in json_texts(item.paths[0]):
                yield "".join(line + "\n" for line in lines)
            continue
        for _, text in iter_decoded(item.paths[0]):
            last = text
            yield text
        if n + 1 < len(inputs) and not last.endswith("\n"):
            yield "\n"
