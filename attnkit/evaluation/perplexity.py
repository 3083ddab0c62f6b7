"""Perplexity from a summed negative log-likelihood."""

from __future__ import annotations

import math
import sys

from attnkit.errors import UsageError

# math.exp raises OverflowError above ~709.78; a diverged model should read as inf.
_MAX_EXP = math.log(sys.float_info.max)


def perplexity(total_nll: float, total_tokens: int) -> float:
    """``exp(total_nll / total_tokens)`` (natural log); ``inf`` instead of an overflow error."""
    if total_tokens <= 0:
        raise UsageError(f"total_tokens must be > 0, got {total_tokens}")
    mean = float(total_nll) / float(total_tokens)
    return math.inf if mean > _MAX_EXP else math.exp(mean)
