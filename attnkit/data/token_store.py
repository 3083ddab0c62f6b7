"""Token ids of many sequences in one flat array, in memory or memory-mapped from disk.

The layout of fairseq's ``MMapIndexedDataset`` and nanoGPT's ``prepare.py``:
all ids back to back (``uint16`` when the vocabulary fits, else ``uint32``),
plus the ``int64`` offset of each sequence (``N + 1`` entries) and its length
(``uint32``). A corpus of any size costs no resident memory until a batch
reads it: ``TokenArray.open`` maps the files read-only, and ``release``
hands the pages read so far back to the kernel (they stay in the page cache),
so a long run's resident memory stays flat instead of growing to the file size.

``TokenPairs`` is a translation corpus (source and target arrays) and turns a
batch of indices into the padded tensors ``collate_translation`` builds.

Shapes: ``N`` sequences, ``T`` ids in all, ``B`` rows of a batch.
"""

from __future__ import annotations

import itertools
import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from attnkit.data.collate import TranslationBatch
from attnkit.errors import DataError

LENGTH_DTYPE = np.dtype(np.uint32)
OFFSET_DTYPE = np.dtype(np.int64)
RELEASE_BYTES = 64 << 20  # hand mapped pages back after reading about this much


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


class TokenArray:
    """``N`` sequences of token ids stored back to back (see the module doc)."""

    def __init__(
        self,
        ids: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        maps: Sequence[mmap.mmap] = (),
    ):
        if offsets.shape != (len(lengths) + 1,):
            raise DataError(f"token array: {len(offsets)} offsets for {len(lengths)} sequences")
        self.ids, self.offsets, self.lengths = ids, offsets, lengths
        self._maps = list(maps)
        self._read = 0  # bytes read from the maps since the last release

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
        return cls(ids, offsets, lengths, [m for m in (m1, m2, m3) if m is not None])

    def gather(self, rows: np.ndarray) -> list[np.ndarray]:
        """The ids of sequences ``rows`` ``(B,)``, as views."""
        starts = self.offsets[rows]
        ends = starts + self.lengths[rows]
        self._count(int((ends - starts).sum()) * self.ids.itemsize + 20 * len(rows))
        return [self.ids[a:b] for a, b in zip(starts.tolist(), ends.tolist())]

    def _count(self, nbytes: int) -> None:
        self._read += nbytes
        if self._read >= RELEASE_BYTES:
            self.release()

    def release(self) -> None:
        """Drop the mapped pages from this process (re-read from the page cache on use)."""
        self._read = 0
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

    def close(self) -> dict[str, Any]:
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
        self.src.release()  # the length arrays were read through once
        self.tgt.release()
        return out

    def batch(
        self, rows: Sequence[int] | np.ndarray, *, pad_id: int, bos_id: int, eos_id: int
    ) -> TranslationBatch:
        """The teacher-forcing tensors of pairs ``rows``, equal to ``collate_translation``'s."""
        rows = np.asarray(rows, dtype=np.int64)
        src = _padded(self.src.gather(rows), pad_id, tail=eos_id)
        tgt_in = _padded(self.tgt.gather(rows), pad_id, head=bos_id)
        tgt_out = _padded(self.tgt.gather(rows), pad_id, tail=eos_id)
        return TranslationBatch(src, tgt_in, tgt_out, pad_id)


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
