"""Collation: padding and the BOS/EOS shift for teacher forcing."""

from __future__ import annotations

import pytest
import torch

from attnkit.data.collate import collate_translation, pad_batch
from attnkit.errors import UsageError


def test_pad_batch() -> None:
    out = pad_batch([[5, 6, 7], [8], []], pad_id=0)
    assert out.dtype == torch.long
    assert out.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    with pytest.raises(UsageError):
        pad_batch([], pad_id=0)


def test_collate_translation() -> None:
    batch = collate_translation(
        [([10, 11], [20]), ([12], [21, 22, 23])], pad_id=0, bos_id=1, eos_id=2
    )
    assert batch.src.tolist() == [[10, 11, 2], [12, 2, 0]]
    assert batch.tgt_in.tolist() == [[1, 20, 0, 0], [1, 21, 22, 23]]
    assert batch.tgt_out.tolist() == [[20, 2, 0, 0], [21, 22, 23, 2]]
    assert batch.num_tgt_tokens == 6
    assert batch.to("cpu").src.tolist() == batch.src.tolist()
