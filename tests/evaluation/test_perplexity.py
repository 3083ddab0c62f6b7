"""Perplexity: exp of the mean NLL, inf instead of overflow."""

from __future__ import annotations

import math

import pytest

from attnkit.errors import UsageError
from attnkit.evaluation.perplexity import perplexity


def test_values() -> None:
    assert perplexity(0.0, 5) == 1.0
    assert perplexity(10 * math.log(4), 10) == pytest.approx(4.0)


def test_overflow_is_inf() -> None:
    assert perplexity(1e6, 10) == math.inf


def test_no_tokens() -> None:
    with pytest.raises(UsageError, match="total_tokens"):
        perplexity(1.0, 0)
