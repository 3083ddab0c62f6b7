import math

import pytest
import torch

from attnkit.positions import LearnedPositions, SinusoidalPositions, build_positions


def test_sinusoidal_matches_the_papers_formula_elementwise():
    d = 16
    pe = SinusoidalPositions(100, d)(100)
    for pos in (0, 1, 7, 99):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_offset_returns_later_rows():
    pos = SinusoidalPositions(10, 4)
    torch.testing.assert_close(pos(3, offset=5), pos(10)[5:8])
    learned = LearnedPositions(10, 4)
    torch.testing.assert_close(learned(2, offset=3), learned.weight[3:5])


def test_table_is_not_saved_in_checkpoints():
    assert "table" not in SinusoidalPositions(10, 4).state_dict()


def test_too_long_and_unknown_kind_raise():
    with pytest.raises(ValueError, match="max_len"):
        SinusoidalPositions(4, 4)(5)
    with pytest.raises(ValueError, match="positions"):
        build_positions("rotary-ish", 4, 4)
