"""Batches of encoded pairs: weighted corpora take their shares; state resumes exactly."""

from __future__ import annotations

import itertools

import numpy as np
import torch

from attnkit.data.pair_batches import PairBatches
from attnkit.data.token_store import ConcatPairs, TokenPairs


def corpus(first_id: int, n: int, seed: int) -> TokenPairs:
    """Pairs whose every id is ``first_id``: a batch row tells its corpus."""
    rng = np.random.default_rng(seed)
    src = [[first_id] * int(rng.integers(1, 12)) for _ in range(n)]
    tgt = [[first_id] * int(rng.integers(1, 12)) for _ in range(n)]
    return TokenPairs.from_lists(src, tgt, np.dtype(np.uint16))


def rows_by_corpus(batches: PairBatches, n_batches: int) -> list[int]:
    out = []
    for pairs, rows in itertools.islice(batches, n_batches):
        out += pairs.batch(rows, pad_id=0, bos_id=1, eos_id=2).src[:, 0].tolist()
    return out


def test_each_corpus_supplies_its_share_of_an_epoch() -> None:
    small, large = corpus(10, 100, 0), corpus(20, 900, 1)
    batches = PairBatches([small, large], max_len=40, seed=5, weights=[1.0, 1.0])
    batches.set_max_tokens(200)
    epoch_len = len(batches._sampler(0).epoch_batches())
    firsts = rows_by_corpus(batches, epoch_len)
    assert len(firsts) == 1000  # an epoch: as many pairs as the corpora hold
    assert firsts.count(10) == 500 and firsts.count(20) == 500  # 1:1, the small one 5 times
    assert batches.epoch == 0 and batches.batch_in_epoch == epoch_len
    weighted = PairBatches([small, large], max_len=40, seed=5, weights=[1.0, 3.0])
    weighted.set_max_tokens(200)
    share = rows_by_corpus(weighted, 60).count(10) / len(rows_by_corpus(weighted, 60))
    assert 0.18 < share < 0.32


def test_epochs_draw_afresh_and_a_state_resumes_exactly() -> None:
    a, b = corpus(10, 300, 2), corpus(20, 300, 3)

    def fresh() -> PairBatches:
        batches = PairBatches([a, b], max_len=40, seed=7, weights=[1.0, 4.0])
        batches.set_max_tokens(150)
        return batches

    def take(batches: PairBatches, n: int) -> list[list[int]]:
        return [rows.tolist() for _, rows in itertools.islice(batches, n)]

    straight = take(fresh(), 120)  # more than one epoch
    first = fresh()
    got = take(first, 50)
    resumed = fresh()
    resumed.load_state_dict(first.state_dict())
    assert got + take(resumed, 70) == straight
    one, two = fresh()._epoch_indices(0), fresh()._epoch_indices(1)
    assert sorted(one.tolist()) != sorted(two.tolist())  # corpus b is subsampled anew


def test_concatenated_corpora_batch_like_each_corpus() -> None:
    a, b = corpus(10, 5, 4), corpus(20, 7, 5)
    both = ConcatPairs([a, b])
    got = both.batch([6, 0, 11, 3], pad_id=0, bos_id=1, eos_id=2)
    want = TokenPairs.concat([(b, np.array([1])), (a, np.array([0])), (b, np.array([6])),
                              (a, np.array([3]))]).batch([0, 1, 2, 3], pad_id=0, bos_id=1,
                                                         eos_id=2)  # fmt: skip
    assert torch.equal(got.src, want.src) and torch.equal(got.tgt_in, want.tgt_in)
    assert len(both) == 12
