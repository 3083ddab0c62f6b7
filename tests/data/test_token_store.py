"""Token arrays on disk and in memory; batches from them equal ``collate_translation``'s."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from attnkit.data.collate import collate_translation
from attnkit.data.token_store import (
    TokenArray,
    TokenArrayWriter,
    TokenPairs,
    id_dtype,
)
from attnkit.errors import DataError

SEQS = [[5, 6, 7], [], [8], [9, 10, 11, 12, 13], [70000 % 65536]]


def test_ids_take_two_bytes_while_the_vocabulary_fits() -> None:
    assert id_dtype(8000) == np.uint16 and id_dtype(65536) == np.uint16
    assert id_dtype(65537) == np.uint32


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_written_arrays_read_back_memory_mapped(tmp_path, dtype) -> None:
    writer = TokenArrayWriter(tmp_path, "src", np.dtype(dtype))
    writer.append(SEQS[:2])
    writer.append(SEQS[2:])
    meta = writer.close()
    assert meta == {"dtype": np.dtype(dtype).name, "count": 5, "tokens": 10, "longest": 5}
    array = TokenArray.open(tmp_path, "src", np.dtype(dtype), 5, 10)
    assert [array[i].tolist() for i in range(5)] == SEQS
    assert (
        array.ids.dtype == dtype
        and (tmp_path / "src.ids").stat().st_size == 10 * array.ids.itemsize
    )
    got = array.gather(np.array([3, 1, 0]))
    assert [g.tolist() for g in got] == [SEQS[3], SEQS[1], SEQS[0]]
    array.release()  # pages handed back; the data reads the same afterwards
    assert array[3].tolist() == SEQS[3]
    in_memory = TokenArray.from_lists(SEQS, np.dtype(dtype))
    assert np.array_equal(in_memory.ids, array.ids) and np.array_equal(
        in_memory.offsets, array.offsets
    )


@pytest.mark.skipif(not hasattr(os, "pread"), reason="os.pread is POSIX; elsewhere: the map")
def test_batches_read_the_files_and_touch_no_page_of_the_map(tmp_path) -> None:
    writer = TokenArrayWriter(tmp_path, "x", np.dtype(np.uint16))
    writer.append(SEQS)
    writer.close()
    array = TokenArray.open(tmp_path, "x", np.dtype(np.uint16), 5, 10)
    got = array.gather(np.array([3, 1, 4, 0, 3]))
    assert [g.tolist() for g in got] == [SEQS[3], SEQS[1], SEQS[4], SEQS[0], SEQS[3]]
    assert all(g.dtype == np.uint16 for g in got)
    # Read with os.pread, not viewed in the map: a touched mapped page counts in the RSS.
    assert not any(np.shares_memory(g, array.ids) for g in got)
    with open(tmp_path / "x.ids", "r+b") as f:  # cut under a running reader
        f.truncate(6)
    with pytest.raises(DataError, match=r"x\.ids: shorter than its manifest says"):
        array.gather(np.array([3]))


def test_a_truncated_file_is_refused(tmp_path) -> None:
    writer = TokenArrayWriter(tmp_path, "x", np.dtype(np.uint16))
    writer.append(SEQS)
    writer.close()
    with open(tmp_path / "x.ids", "r+b") as f:
        f.truncate(6)
    with pytest.raises(DataError, match=r"x\.ids: expected 20 bytes"):
        TokenArray.open(tmp_path, "x", np.dtype(np.uint16), 5, 10)


def test_batches_from_arrays_equal_collate_translation() -> None:
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 500, rng.integers(1, 20)).tolist() for _ in range(40)]
    tgt = [rng.integers(4, 500, rng.integers(1, 20)).tolist() for _ in range(40)]
    pairs = TokenPairs.from_lists(src, tgt, np.dtype(np.uint16))
    rows = [7, 3, 39, 0, 12]
    got = pairs.batch(rows, pad_id=0, bos_id=1, eos_id=2)
    want = collate_translation([(src[i], tgt[i]) for i in rows], 0, 1, 2)
    for name in ("src", "tgt_in", "tgt_out"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
        assert getattr(got, name).dtype == torch.long
    # Other special ids (an imported vocabulary's) go where collate_translation puts them.
    got = pairs.batch(rows, pad_id=9, bos_id=7, eos_id=8)
    want = collate_translation([(src[i], tgt[i]) for i in rows], 9, 7, 8)
    assert torch.equal(got.tgt_in, want.tgt_in) and torch.equal(got.src, want.src)
    # Costs: the padded length of each pair as collated.
    assert pairs.costs().tolist() == [max(len(s), len(t)) + 1 for s, t in zip(src, tgt)]


def test_concatenated_rows_of_several_corpora() -> None:
    a = TokenPairs.from_lists([[4], [5, 6]], [[7], [8]], np.dtype(np.uint16))
    b = TokenPairs.from_lists([[9, 9, 9]], [[10]], np.dtype(np.uint32))
    both = TokenPairs.concat([(a, np.array([1])), (b, np.array([0])), (a, np.array([0]))])
    assert [both.src[i].tolist() for i in range(3)] == [[5, 6], [9, 9, 9], [4]]
    assert both.src.ids.dtype == np.uint32
