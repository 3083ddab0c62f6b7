"""Prepare a corpus once: a tokenizer from a bounded sample, then token ids on disk.

Two cached stages (``attnkit.data.cache``: keyed by a hash, atomic, reused):

1. ``tokenizer``: one pass over the training inputs draws a seeded sample of
   at most ``tokenizer.sample_size`` records (``vocabulary.Reservoir``) and
   trains the configured kind on it. Skipped when the run already has its
   tokenizer (``tokenizer.path``, or ``--resume``: the checkpoint's).
2. ``pairs`` (translation) or ``text`` (lm/mlm): every record encoded with
   the tokenizer's batch encoder (HF ``encode_batch`` and SentencePiece use
   every core; the next block is read by a second thread meanwhile) into
   ``token_store`` files: ids as ``uint16`` when the vocabulary fits, else
   ``uint32``, with offsets and lengths. Keyed by the inputs and the
   tokenizer itself (a hash of its JSON), so a resumed run finds the data its
   first run prepared.

Training then maps the files (``TokenPairs``/``TokenArray``); nothing of the
corpus is held in Python objects.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from attnkit.data.cache import FileIdentity, Log, digest, ensure, file_identity
from attnkit.data.formats import (
    Input,
    iter_pair_chunks,
    iter_text_pieces,
    text_lines,
)
from attnkit.data.readers import check_readable
from attnkit.data.token_store import TokenArray, TokenArrayWriter, TokenPairs, id_dtype
from attnkit.data.tokenizer_kinds import load_tokenizer
from attnkit.data.tokenizers import Tokenizer
from attnkit.data.vocabulary import Reservoir, train_tokenizer

T = TypeVar("T")
TEXT_PIECE_CHARS = 1 << 20  # an LM corpus is encoded in pieces of about 1M characters ...
TEXT_PIECES_PER_BATCH = 16  # ... 16 at a time, in parallel


class TokenizerSettings(Protocol):
    """The ``tokenizer`` section of a run config (``kind``, ``vocab_size``, ``sample_size``)."""

    @property
    def kind(self) -> str: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def sample_size(self) -> int: ...


def identities(inputs: Sequence[Input]) -> list[FileIdentity]:
    """The fingerprint entries of every file of ``inputs`` (checked to be readable)."""
    paths = [p for item in inputs for p in item.paths]
    for p in paths:
        check_readable(p)
    return [file_identity(p) for p in paths]


def tokenizer_digest(tokenizer: Tokenizer) -> str:
    """A hash of the tokenizer's JSON (independent of key order)."""
    return digest(json.loads(tokenizer.to_json()))


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """``items``, produced by a background thread up to ``depth`` ahead.

    Reading and splitting lines (Python) overlaps encoding (native, GIL
    released); an exception in the reader is raised here, in order.
    """
    q: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                q.put(("item", item))
            q.put(("end", None))
        except BaseException as e:  # handed to the consumer
            q.put(("error", e))

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        while True:
            kind, value = q.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(0.05)


class Progress:
    """Says how far a long pass has come, at most every ``every`` seconds (``log`` lines)."""

    def __init__(self, log: Log | None, what: str, every: float = 30.0):
        self.log, self.what, self.every = log, what, every
        self.start = self.last = time.perf_counter()
        self.count = 0

    def add(self, n: int) -> None:
        self.count += n
        now = time.perf_counter()
        if self.log is not None and now - self.last >= self.every:
            self.last = now
            rate = self.count / (now - self.start)
            self.log(f"  ... {self.count:,} {self.what} ({rate:,.0f}/s)")


def _trained_tokenizer(
    stage_inputs: Mapping[str, object],
    settings: TokenizerSettings,
    train: Callable[[], tuple[Tokenizer, Reservoir[str] | Reservoir[tuple[str, str]]]],
    root: Path,
    log: Log | None,
) -> Tokenizer:
    """``train()``'s tokenizer, cached under the inputs and the tokenizer settings."""
    fingerprint = {
        **stage_inputs,
        "tokenizer": {"kind": settings.kind, "vocab_size": settings.vocab_size,
                      "sample_size": settings.sample_size},
    }  # fmt: skip

    def build(tmp: Path) -> dict[str, object]:
        start = time.perf_counter()
        tokenizer, reservoir = train()
        tokenizer.save(tmp / "tokenizer.json")
        seconds = time.perf_counter() - start
        if log:
            sampled = f"{len(reservoir.items):,} of {reservoir.seen:,} records"
            log(f"trained a {settings.kind} tokenizer of {tokenizer.vocab_size:,} ids on "
                f"{sampled} in {seconds:.1f} s")  # fmt: skip
        return {"sampled": len(reservoir.items), "records": reservoir.seen,
                "seconds": round(seconds, 3)}  # fmt: skip

    directory, _ = ensure(root, "tokenizer", fingerprint, build, log=log)
    return load_tokenizer(directory / "tokenizer.json")


def train_on_pairs(
    chunks: Iterable[Sequence[tuple[str, str]]],
    settings: TokenizerSettings,
    log: Log | None = None,
) -> tuple[Tokenizer, Reservoir[tuple[str, str]]]:
    """A tokenizer trained jointly on both sides of a sample of the pairs in ``chunks``
    (sources first, then targets, as attnkit always trained BPE), and the sample."""
    reservoir: Reservoir[tuple[str, str]] = Reservoir(settings.sample_size)
    progress = Progress(log, "pairs read for the tokenizer's sample")
    for chunk in chunks:
        reservoir.add(chunk)
        progress.add(len(chunk))
    texts = [s for s, _ in reservoir.items] + [t for _, t in reservoir.items]
    return train_tokenizer(settings.kind, texts, settings.vocab_size), reservoir


def train_on_text(
    inputs: Sequence[Input], settings: TokenizerSettings
) -> tuple[Tokenizer, Reservoir[str]]:
    """A tokenizer trained on a sample of the corpus's lines, and the sample.

    Lines are those of the exact text (``text.split("\\n")``): a char vocabulary
    is trained on them joined again, BPE and unigram on the lines, as
    ``attnkit.data.lm.train_lm_tokenizer`` does with the whole text.
    """
    reservoir: Reservoir[str] = Reservoir(settings.sample_size)
    for lines in text_lines(inputs):
        reservoir.add(lines)
    texts = ["\n".join(reservoir.items)] if settings.kind == "char" else reservoir.items
    return train_tokenizer(settings.kind, texts, settings.vocab_size), reservoir


# -- translation ------------------------------------------------------------------------


@dataclass
class PreparedPairs:
    """A prepared parallel corpus: memory-mapped ids, their tokenizer, its directory."""

    pairs: TokenPairs
    tokenizer: Tokenizer
    dropped_empty: int
    directory: Path


def pair_tokenizer(
    inputs: Sequence[Input],
    settings: TokenizerSettings,
    *,
    skip_empty: bool,
    root: Path,
    log: Log | None = None,
) -> Tokenizer:
    """The tokenizer trained on a sample of the pairs of ``inputs`` (cached)."""

    def train() -> tuple[Tokenizer, Reservoir[tuple[str, str]]]:
        chunks = iter_pair_chunks(inputs, skip_empty=skip_empty)
        return train_on_pairs((list(zip(c.src, c.tgt)) for c in chunks), settings, log)

    stage = {"inputs": identities(inputs), "read": {"skip_empty": skip_empty}}
    return _trained_tokenizer(stage, settings, train, root, log)


def prepare_pairs(
    inputs: Sequence[Input],
    tokenizer: Tokenizer,
    *,
    skip_empty: bool,
    root: Path,
    log: Log | None = None,
) -> PreparedPairs:
    """Every pair of ``inputs`` encoded with ``tokenizer`` into a cached directory."""
    fingerprint = {"inputs": identities(inputs), "read": {"skip_empty": skip_empty},
                   "tokenizer": tokenizer_digest(tokenizer)}  # fmt: skip

    def build(tmp: Path) -> dict[str, object]:
        start = time.perf_counter()
        dtype = id_dtype(tokenizer.vocab_size)
        src, tgt = TokenArrayWriter(tmp, "src", dtype), TokenArrayWriter(tmp, "tgt", dtype)
        dropped = 0
        progress = Progress(log, "pairs encoded")
        for chunk in prefetch(iter_pair_chunks(inputs, skip_empty=skip_empty)):
            ids = tokenizer.encode_batch(chunk.src + chunk.tgt)  # one call: all cores busy
            src.append(ids[: len(chunk)])
            tgt.append(ids[len(chunk) :])
            dropped += chunk.dropped_empty
            progress.add(len(chunk))
        tokenizer.save(tmp / "tokenizer.json")  # the vocabulary the ids belong to
        seconds = time.perf_counter() - start
        src_meta, tgt_meta = src.close(), tgt.close()
        meta: dict[str, object] = {"src": src_meta, "tgt": tgt_meta, "dropped_empty": dropped,
                                   "seconds": round(seconds, 3)}  # fmt: skip
        if log:
            n = src_meta["count"]
            log(f"encoded {n:,} pairs ({src_meta['tokens'] + tgt_meta['tokens']:,} "
                f"tokens, {dtype.name}) in {seconds:.1f} s ({n / max(seconds, 1e-9):,.0f} "
                "pairs/s)")  # fmt: skip
        return meta

    directory, manifest = ensure(root, "pairs", fingerprint, build, log=log)
    pairs = TokenPairs(*(_open(directory, manifest, side) for side in ("src", "tgt")))
    return PreparedPairs(pairs, tokenizer, int(manifest["dropped_empty"]), directory)


def _open(directory: Path, manifest: dict[str, Any], name: str) -> TokenArray:
    meta = manifest[name]
    return TokenArray.open(directory, name, np.dtype(meta["dtype"]), meta["count"], meta["tokens"])


# -- language-model text -----------------------------------------------------------------


@dataclass
class PreparedText:
    """A prepared LM corpus: one memory-mapped stream of ids and its tokenizer."""

    array: TokenArray
    tokenizer: Tokenizer
    directory: Path

    @property
    def ids(self) -> np.ndarray:
        """``(N,)`` every token of the corpus (memory-mapped)."""
        return self.array.ids

    def release(self) -> None:
        """Hand back the pages of the map read so far (``TokenArray.release``)."""
        self.array.release()


def text_tokenizer(
    inputs: Sequence[Input], settings: TokenizerSettings, *, root: Path, log: Log | None = None
) -> Tokenizer:
    """The tokenizer trained on a sample of the corpus's lines (cached; ``train_on_text``)."""
    stage = {"inputs": identities(inputs)}
    return _trained_tokenizer(stage, settings, lambda: train_on_text(inputs, settings), root, log)


def prepare_text(
    inputs: Sequence[Input], tokenizer: Tokenizer, *, root: Path, log: Log | None = None
) -> PreparedText:
    """The whole corpus encoded with ``tokenizer`` into one cached stream of ids."""
    fingerprint = {"inputs": identities(inputs), "tokenizer": tokenizer_digest(tokenizer)}

    def build(tmp: Path) -> dict[str, object]:
        start = time.perf_counter()
        writer = TokenArrayWriter(tmp, "text", id_dtype(tokenizer.vocab_size))
        pieces = iter_text_pieces(inputs, TEXT_PIECE_CHARS)
        for batch in prefetch(_batched(pieces, TEXT_PIECES_PER_BATCH)):
            writer.append(tokenizer.encode_batch(batch))
        tokenizer.save(tmp / "tokenizer.json")
        seconds = time.perf_counter() - start
        text_meta = writer.close()
        meta: dict[str, object] = {"text": text_meta, "seconds": round(seconds, 3)}
        if log:
            log(f"encoded {text_meta['tokens']:,} tokens in {seconds:.1f} s")
        return meta

    directory, manifest = ensure(root, "text", fingerprint, build, log=log)
    return PreparedText(_open(directory, manifest, "text"), tokenizer, directory)


def _batched(items: Iterable[T], n: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch
