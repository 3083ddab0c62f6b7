"""Token-budget batching: budget, coverage, determinism, epochs, DDP shards."""

from __future__ import annotations

import numpy as np
import pytest

from attnkit.data.batching import TokenBudgetSampler, filter_by_length
from attnkit.errors import UsageError


def random_lengths(seed: int, n: int = 500) -> tuple[list[int], list[int]]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 60, n).tolist(), rng.integers(1, 60, n).tolist()


def cost(batch: list[int], src: list[int], tgt: list[int]) -> int:
    return len(batch) * max(max(src[i], tgt[i]) for i in batch)


@pytest.mark.parametrize("seed", range(8))
def test_budget_never_exceeded_and_each_index_once(seed: int) -> None:
    src, tgt = random_lengths(seed)
    max_tokens = int(np.random.default_rng(seed).integers(60, 1000))
    sampler = TokenBudgetSampler(src, tgt, max_tokens=max_tokens, seed=seed)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert all(cost(b, src, tgt) <= max_tokens for b in batches)
    assert sorted(i for b in batches for i in b) == list(range(len(src)))


def test_batches_are_reasonably_full() -> None:
    src, tgt = random_lengths(0, n=2000)
    sampler = TokenBudgetSampler(src, tgt, max_tokens=1000)
    used = sum(cost(b, src, tgt) for b in sampler)
    # Length bucketing wastes little: most of the budget holds real tokens.
    assert used / (len(sampler) * 1000) > 0.9


def test_max_sentences() -> None:
    sampler = TokenBudgetSampler([1] * 10, max_tokens=100, max_sentences=3)
    assert sorted(len(b) for b in sampler) == [1, 3, 3, 3]


def test_deterministic_for_seed_and_epoch() -> None:
    src, tgt = random_lengths(1)
    a = TokenBudgetSampler(src, tgt, max_tokens=400, seed=7)
    b = TokenBudgetSampler(src, tgt, max_tokens=400, seed=7)
    assert list(a) == list(b)
    a.set_epoch(3)
    b.set_epoch(3)
    assert list(a) == list(b)
    c = TokenBudgetSampler(src, tgt, max_tokens=400, seed=8)
    assert list(c) != list(b)


def test_order_and_contents_change_across_epochs() -> None:
    src, tgt = random_lengths(2)
    sampler = TokenBudgetSampler(src, tgt, max_tokens=400)
    first = list(sampler)
    sampler.set_epoch(1)
    second = list(sampler)
    assert first != second
    assert len(first) == len(second)
    # Not only the order: ties are regrouped, so some batches have new members.
    assert {tuple(sorted(b)) for b in first} != {tuple(sorted(b)) for b in second}


def test_no_shuffle_is_sorted_by_length() -> None:
    lengths = [5, 1, 3, 2, 4]
    batches = list(TokenBudgetSampler(lengths, max_tokens=5, shuffle=False))
    assert batches == [[1, 3], [2], [4], [0]]


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ddp_shards_disjoint_equal_and_cover(world_size: int) -> None:
    src, tgt = random_lengths(3)
    shards = []
    for rank in range(world_size):
        s = TokenBudgetSampler(src, tgt, max_tokens=300, rank=rank, world_size=world_size)
        s.set_epoch(5)
        shards.append(list(s))
    full = TokenBudgetSampler(src, tgt, max_tokens=300)
    full.set_epoch(5)
    all_batches = full.epoch_batches()
    assert len({len(shard) for shard in shards}) == 1  # same step count on every rank
    assert len(shards[0]) == len(all_batches) // world_size
    seen = [i for shard in shards for b in shard for i in b]
    assert len(seen) == len(set(seen))  # disjoint
    # Together they cover everything but the dropped remainder (< world_size batches).
    dropped = all_batches[len(all_batches) - len(all_batches) % world_size :]
    assert set(seen) | {i for b in dropped for i in b} == set(range(len(src)))


def test_too_long_example_raises_naming_max_tokens() -> None:
    with pytest.raises(UsageError, match=r"example 2 has 50 tokens, more than max_tokens=40"):
        TokenBudgetSampler([3, 4, 50], [3, 4, 5], max_tokens=40)


def test_filter_then_sample() -> None:
    src, tgt = [3, 70, 5, 6, 2], [4, 5, 90, 6, 1]
    kept, dropped = filter_by_length(src, tgt, max_len=10)
    assert kept == [0, 3, 4] and dropped == 2
    sampler = TokenBudgetSampler(src, tgt, max_tokens=20, indices=kept)
    assert sorted(i for b in sampler for i in b) == kept


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 10, "rank": 2, "world_size": 2}, "rank"),
        ({"max_tokens": 10, "indices": [5]}, "indices"),
    ],
)
def test_bad_options(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        TokenBudgetSampler([1, 2], **kwargs)


def _greedy_reference(lengths, order, max_tokens, max_sentences):
    """Example by example, as the sampler was first written: the brute force."""
    batches, current, longest = [], [], 0
    for pos in order:
        grown = max(longest, int(lengths[pos]))
        full = max_sentences is not None and len(current) >= max_sentences
        if current and (full or grown * (len(current) + 1) > max_tokens):
            batches.append(current)
            current, grown = [], int(lengths[pos])
        current.append(pos)
        longest = grown
    return batches + ([current] if current else [])


def test_the_numpy_plan_cuts_exactly_as_greedy_example_by_example():
    rng = np.random.default_rng(0)
    for trial in range(150):
        n = int(rng.integers(0, 200))
        src, tgt = rng.integers(0, 60, n), rng.integers(1, 60, n)
        max_tokens = int(rng.integers(60, 400))
        max_sentences = None if trial % 3 else int(rng.integers(1, 12))
        kept = None if trial % 2 else np.sort(rng.choice(n, n // 2, replace=False))
        sampler = TokenBudgetSampler(src, tgt, max_tokens=max_tokens, indices=kept,
                                     max_sentences=max_sentences, seed=trial)  # fmt: skip
        sampler.set_epoch(trial % 4)
        lengths = np.maximum(src, tgt) if kept is None else np.maximum(src, tgt)[kept]
        index = np.arange(n) if kept is None else kept
        # The same random tie order, then the reference cut of it.
        rng_e = np.random.default_rng([trial, trial % 4])
        order = rng_e.permutation(len(lengths))
        order = order[np.argsort(lengths[order], kind="stable")]
        want = _greedy_reference(lengths, order.tolist(), max_tokens, max_sentences)
        want = [want[i] for i in rng_e.permutation(len(want))]
        assert sampler.epoch_batches() == [index[b].tolist() for b in want]
        assert len(sampler) == len(want)


def test_a_plan_of_millions_stays_in_compact_arrays():
    lengths = np.random.default_rng(1).integers(2, 100, 3_000_000).astype(np.uint16)
    sampler = TokenBudgetSampler(lengths, max_tokens=4096, seed=3)
    plan = sampler.plan()
    assert plan.order.dtype == np.uint32 and sampler.lengths.dtype == np.uint16
    rows = plan.batch(0)
    assert int(lengths[rows].max()) * len(rows) <= 4096
    assert sum(len(plan.batch(i)) for i in range(0, len(plan), 97)) > 0
