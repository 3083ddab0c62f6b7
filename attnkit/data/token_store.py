"""Token ids of many sequences in one flat array, in memory or memory-mapped from disk.

The layout of fairseq's ``MMapIndexedDataset`` and nanoGPT's ``prepare.py``:
all ids back to back (``uint16`` when the vocabulary fits, else ``uint32``),
plus the ``int64`` offset of each sequence (``N + 1`` entries) and its length
(``uint32``). A corpus of any size costs no resident memory: ``TokenArray.open``
maps the files read-only (for whole-array reads such as the length scan, after
which ``release`` hands the pages back), and ``gather``, what batches use,
reads each sequence's offsets and ids with ``os.pread``. Those reads go through
the kernel's page cache and touch no page of the map: a mapped page a process
has touched counts in its resident memory, and a page fault maps up to 64 KB
around it (Linux's fault-around), so the first three batches of rows drawn at
random over 4.35M pairs had mapped ~260 MB of the files into the training
process's RSS.

``TokenPairs`` is a translation corpus (source and target arrays) and turns a
batch of indices into the padded tensors ``collate_translation`` builds.

Shapes: ``N`` sequences, ``T`` ids in all, ``B`` rows of a batch.
"""

from __future__ import annotations

import itertools
import mmap
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypedDict

import numpy as np
import torch

from attnkit.data.collate import TranslationBatch
from attnkit.errors import DataError

LENGTH_DTYPE = np.dtype(np.uint32)
OFFSET_DTYPE = np.dtype(np.int64)
_BOUNDS = struct.Struct("=2q")  # offsets i and i + 1, as OFFSET_DTYPE stores them


def id_dtype(vocab_size: int) -> np.dtype:
    """``uint16`` for up to 65,536 ids, else ``uint32``."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def _map(path: Path, dtype: np.dtype, count: int) -> tuple[np.ndarray, mmap.mmap | None]:
    """``count`` items of ``dtype`` from ``path``, memory-mapped read-only."""
    if count == 0:
        return np.empty(0, dtype), None
    size = count * dtype.itemsize
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size != size:
                raise DataError(f"{path}: expected {size} bytes; the prepared data is damaged")
            mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    except OSError as e:
        raise DataError(f"{path}: cannot map the prepared data ({e.strerror or e})") from None
    return np.frombuffer(mapped, dtype=dtype, count=count), mapped


class _RowReader:
    """Sequences read from ``{name}.off`` and ``{name}.ids`` with ``os.pread`` (see the
    module doc): two small reads per sequence, no mapped page touched."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype):
        self.dtype = dtype
        self.paths = (directory / f"{name}.off", directory / f"{name}.ids")
        # Unbuffered: pread ignores the file position; closed when the array goes.
        self._off, self._ids = (open(p, "rb", buffering=0) for p in self.paths)  # noqa: SIM115

    def rows(self, rows: Sequence[int]) -> list[np.ndarray]:
        width, off, ids = self.dtype.itemsize, self._off.fileno(), self._ids.fileno()
        out = []
        for row in rows:
            bounds = os.pread(off, _BOUNDS.size, row * OFFSET_DTYPE.itemsize)
            if len(bounds) != _BOUNDS.size:
                self._damaged(0)
            start, end = _BOUNDS.unpack(bounds)
            data = os.pread(ids, (end - start) * width, start * width)
            if len(data) != (end - start) * width:
                self._damaged(1)
            out.append(np.frombuffer(data, self.dtype))
        return out

    def _damaged(self, which: int) -> None:
        raise DataError(f"{self.paths[which]}: shorter than its manifest says; "
                        "the prepared data is damaged")  # fmt: skip


class ArrayMeta(TypedDict):
    """What ``TokenArrayWriter.close`` reports (a prepared directory's manifest keeps it)."""

    dtype: str  # numpy's name
    count: int  # sequences
    tokens: int
    longest: int


class TokenArray:
    """``N`` sequences of token ids stored back to back (see the module doc)."""

    def __init__(
        self,
        ids: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        maps: Sequence[mmap.mmap] = (),
        reader: _RowReader | None = None,
    ):
        if offsets.shape != (len(lengths) + 1,):
            raise DataError(f"token array: {len(offsets)} offsets for {len(lengths)} sequences")
        self.ids, self.offsets, self.lengths = ids, offsets, lengths
        self._maps = list(maps)
        self._reader = reader  # opened from files: gather reads them (not the maps)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        """The ids of sequence ``i`` (a view)."""
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    @property
    def num_tokens(self) -> int:
        return len(self.ids)

    @classmethod
    def from_lists(cls, seqs: Sequence[Sequence[int]], dtype: np.dtype) -> TokenArray:
        """An in-memory array of ``seqs``."""
        lengths = np.fromiter(map(len, seqs), LENGTH_DTYPE, count=len(seqs))
        offsets = np.zeros(len(seqs) + 1, OFFSET_DTYPE)
        np.cumsum(lengths, out=offsets[1:])
        flat = itertools.chain.from_iterable(seqs)
        return cls(np.fromiter(flat, dtype, count=int(offsets[-1])), offsets, lengths)

    @classmethod
    def from_arrays(cls, seqs: Sequence[np.ndarray], dtype: np.dtype) -> TokenArray:
        """An in-memory array of ``seqs`` given as NumPy arrays."""
        lengths = np.fromiter(map(len, seqs), LENGTH_DTYPE, count=len(seqs))
        offsets = np.zeros(len(seqs) + 1, OFFSET_DTYPE)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.concatenate(seqs).astype(dtype, copy=False) if seqs else np.empty(0, dtype)
        return cls(ids, offsets, lengths)

    @classmethod
    def open(
        cls, directory: Path, name: str, dtype: np.dtype, count: int, tokens: int
    ) -> TokenArray:
        """The array ``TokenArrayWriter(directory, name)`` wrote, memory-mapped."""
        ids, m1 = _map(directory / f"{name}.ids", dtype, tokens)
        offsets, m2 = _map(directory / f"{name}.off", OFFSET_DTYPE, count + 1)
        lengths, m3 = _map(directory / f"{name}.len", LENGTH_DTYPE, count)
        maps = [m for m in (m1, m2, m3) if m is not None]
        reader = _RowReader(directory, name, dtype) if hasattr(os, "pread") else None
        return cls(ids, offsets, lengths, maps, reader)

    def gather(self, rows: np.ndarray) -> list[np.ndarray]:
        """The ids of sequences ``rows`` ``(B,)``: views, or read from the files."""
        if self._reader is not None:
            return self._reader.rows(rows.tolist())
        starts = self.offsets[rows]
        ends = starts + self.lengths[rows]
        return [self.ids[a:b] for a, b in zip(starts.tolist(), ends.tolist())]

    def release(self) -> None:
        """Drop the mapped pages from this process (re-read from the page cache on use)."""
        if hasattr(mmap, "MADV_DONTNEED"):  # Linux, macOS; elsewhere a no-op
            for m in self._maps:
                m.madvise(mmap.MADV_DONTNEED)


class TokenArrayWriter:
    """Appends sequences to ``{name}.ids``, ``{name}.len`` and ``{name}.off`` in ``directory``."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype):
        self.directory, self.name, self.dtype = directory, name, dtype
        self._files: dict[str, BinaryIO] = {
            ext: open(directory / f"{name}.{ext}", "wb")  # noqa: SIM115 - closed in close()
            for ext in ("ids", "len", "off")
        }
        self._files["off"].write(np.zeros(1, OFFSET_DTYPE).tobytes())
        self.count = self.tokens = self.longest = 0

    def append(self, seqs: Sequence[Sequence[int]]) -> None:
        lengths = np.fromiter(map(len, seqs), LENGTH_DTYPE, count=len(seqs))
        total = int(lengths.sum(dtype=np.int64))
        flat = np.fromiter(itertools.chain.from_iterable(seqs), self.dtype, count=total)
        self.append_arrays(flat, lengths)

    def append_arrays(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Append sequences given as their ids back to back and their lengths."""
        offsets = self.tokens + np.cumsum(lengths, dtype=OFFSET_DTYPE)
        self._files["ids"].write(np.ascontiguousarray(flat, self.dtype).tobytes())
        self._files["len"].write(np.ascontiguousarray(lengths, LENGTH_DTYPE).tobytes())
        self._files["off"].write(offsets.tobytes())
        self.count += len(lengths)
        self.tokens += len(flat)
        if len(lengths):
            self.longest = max(self.longest, int(lengths.max()))

    def close(self) -> ArrayMeta:
        """Flush and sync the files; what ``TokenArray.open`` needs to read them back."""
        for f in self._files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()
        return {"dtype": self.dtype.name, "count": self.count, "tokens": self.tokens,
                "longest": self.longest}  # fmt: skip


@dataclass
class TokenPairs:
    """A translation corpus as token ids: ``src[i]`` translates to ``tgt[i]`` (no specials)."""

    src: TokenArray
    tgt: TokenArray

    def __post_init__(self) -> None:
        if len(self.src) != len(self.tgt):
            raise DataError(f"token pairs: {len(self.src)} sources but {len(self.tgt)} targets")

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def from_lists(
        cls, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], dtype: np.dtype
    ) -> TokenPairs:
        return cls(TokenArray.from_lists(src, dtype), TokenArray.from_lists(tgt, dtype))

    @classmethod
    def concat(cls, parts: Sequence[tuple[TokenPairs, np.ndarray]]) -> TokenPairs:
        """An in-memory corpus of the given rows of several corpora, in order."""
        dtype = max((p.src.ids.dtype for p, _ in parts), key=lambda d: d.itemsize,
                    default=np.dtype(np.uint16))  # fmt: skip
        src = [a for p, rows in parts for a in p.src.gather(rows)]
        tgt = [a for p, rows in parts for a in p.tgt.gather(rows)]
        return cls(TokenArray.from_arrays(src, dtype), TokenArray.from_arrays(tgt, dtype))

    def costs(self) -> np.ndarray:
        """``(N,)`` padded length of each pair as collated: max(source + EOS, BOS + target)."""
        longest = np.maximum(self.src.lengths, self.tgt.lengths)
        limit = int(longest.max(initial=0)) + 1
        out = longest.astype(np.uint16 if limit < 1 << 16 else np.uint32)
        out += 1
        return out

    def release(self) -> None:
        """Hand back the mapped pages read so far (``TokenArray.release``)."""
        self.src.release()
        self.tgt.release()

    def batch(
        self, rows: Sequence[int] | np.ndarray, *, pad_id: int, bos_id: int, eos_id: int
    ) -> TranslationBatch:
        """The teacher-forcing tensors of pairs ``rows``, equal to ``collate_translation``'s."""
        rows = np.asarray(rows, dtype=np.int64)
        src, tgt = self.src.gather(rows), self.tgt.gather(rows)
        return TranslationBatch(
            _padded(src, pad_id, tail=eos_id),
            _padded(tgt, pad_id, head=bos_id),
            _padded(tgt, pad_id, tail=eos_id),
            pad_id,
        )


class ConcatPairs:
    """Several corpora's ``TokenPairs`` read as one: row ``i`` of part ``k`` is row
    ``starts[k] + i`` (``data.corpora`` prepared, each corpus in its own cache entry)."""

    def __init__(self, parts: Sequence[TokenPairs]):
        self.parts = list(parts)
        self.starts = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def batch(
        self, rows: Sequence[int] | np.ndarray, *, pad_id: int, bos_id: int, eos_id: int
    ) -> TranslationBatch:
        """As ``TokenPairs.batch``, rows gathered from the part each belongs to."""
        rows = np.asarray(rows, dtype=np.int64)
        owner = np.searchsorted(self.starts, rows, side="right") - 1
        src: list[np.ndarray] = [np.empty(0)] * len(rows)
        tgt: list[np.ndarray] = [np.empty(0)] * len(rows)
        for k in np.unique(owner).tolist():
            where = np.flatnonzero(owner == k)
            local = rows[where] - self.starts[k]
            part = self.parts[k]
            for i, s, t in zip(where.tolist(), part.src.gather(local), part.tgt.gather(local)):
                src[i], tgt[i] = s, t
        return TranslationBatch(
            _padded(src, pad_id, tail=eos_id),
            _padded(tgt, pad_id, head=bos_id),
            _padded(tgt, pad_id, tail=eos_id),
            pad_id,
        )


def _padded(
    seqs: list[np.ndarray], pad_id: int, *, head: int | None = None, tail: int | None = None
) -> torch.Tensor:
    """(B, L) int64: each sequence with ``head`` before or ``tail`` after, right-padded."""
    extra = 1  # one special token per row
    lengths = np.fromiter(map(len, seqs), np.int64, count=len(seqs))
    out = np.full((len(seqs), int(lengths.max(initial=0)) + extra), pad_id, dtype=np.int64)
    start = 1 if head is not None else 0
    for row, seq in enumerate(seqs):
        out[row, start : start + len(seq)] = seq
    rows = np.arange(len(seqs))
    if head is not None:
        out[:, 0] = head
    if tail is not None:
        out[rows, lengths] = tail
    return torch.from_numpy(out)
