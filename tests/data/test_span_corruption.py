"""Span corruption (T5): the input and target restore the original; noise share and span length."""

import statistics

import pytest
import torch

from attnkit.data.span_corruption import noise_mask, restore, span_corrupt

SENTINELS = list(range(1000, 1100))


@pytest.mark.parametrize("length", [2, 3, 7, 13, 64, 500])
def test_input_and_target_restore_the_original_with_sentinels_in_order(length):
    generator = torch.Generator().manual_seed(length)
    ids = list(range(length))
    source, target = span_corrupt(ids, SENTINELS, generator)
    assert restore(source, target, SENTINELS) == ids
    used = [t for t in target if t in SENTINELS]
    assert used == SENTINELS[: len(used)] and [t for t in source if t in SENTINELS] == used
    assert target[0] == SENTINELS[0]  # the target starts with the first sentinel
    assert source[0] == 0  # T5's sequences start with kept tokens
    assert len(source) - len(used) + len(target) - len(used) == length


def test_fifteen_percent_of_the_tokens_in_spans_of_three_on_average():
    generator = torch.Generator().manual_seed(0)
    shares, spans = [], []
    for _ in range(200):
        mask = noise_mask(200, generator)
        shares.append(sum(mask) / 200)
        runs = "".join("1" if m else "0" for m in mask).split("0")
        spans += [len(r) for r in runs if r]
    assert statistics.fmean(shares) == pytest.approx(0.15, abs=1e-9)  # round(200 * 0.15) = 30
    assert statistics.fmean(spans) == pytest.approx(3.0, abs=1e-9)  # 30 noise / 10 spans
    assert min(spans) >= 1 and max(spans) > 3  # random lengths, not all 3


def test_the_same_seed_gives_the_same_corruption_and_short_inputs_still_corrupt():
    a = span_corrupt(list(range(20)), SENTINELS, torch.Generator().manual_seed(5))
    b = span_corrupt(list(range(20)), SENTINELS, torch.Generator().manual_seed(5))
    assert a == b
    source, target = span_corrupt([7, 8], SENTINELS, torch.Generator().manual_seed(0))
    assert source == [7, SENTINELS[0]] and target == [SENTINELS[0], 8]
    assert span_corrupt([7], SENTINELS, torch.Generator()) == ([7], [])


def test_too_few_sentinels_is_an_error():
    with pytest.raises(ValueError, match="^sentinels: "):
        span_corrupt(list(range(300)), SENTINELS[:3], torch.Generator().manual_seed(0))
