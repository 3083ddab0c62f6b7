"""Prompt-lookup decoding: speculative decoding without a second model.

Text that copies from its prompt (a summary quoting an e-mail, code edits,
a repeated paragraph) can be drafted by looking up the sequence's last
n-gram earlier in the prompt and output, as transformers'
``prompt_lookup_num_tokens`` does (Saxena, 2023): find the last ``n`` tokens
(``n = max_ngram .. 1``) at an earlier place in the sequence (the most recent
one) and propose the (up to) ``num_tokens`` tokens that followed it. The model
checks each draft in one pass (``attnkit.decoding.speculative``): greedy gives
plain greedy's tokens, sampling plain sampling's distribution (the draft is
deterministic: a one-hot ``q`` in the acceptance rule).

Batch 1 only (one prompt).

Shapes: ``T`` prompt length, ``V`` vocabulary, ``k`` draft length.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from attnkit.decoding.common import check_int
from attnkit.decoding.protocol import AnyStepper, CausalStepper, Draft
from attnkit.decoding.speculative import Sampling, SpeculativeStats, speculative_stream

DEFAULT_NGRAM = 3

LookupStats = SpeculativeStats  # the name this module's callers knew first


class NgramIndex:
    """Where each n-gram (``n <= max_ngram``) of a growing sequence last ended.

    ``draft(k)`` proposes the ``k`` tokens that followed the most recent earlier
    occurrence of the sequence's longest matching suffix n-gram.
    """

    def __init__(self, ids: list[int], max_ngram: int) -> None:
        self.ids = ids  # shared with the caller, who appends to it
        self.max_ngram = max_ngram
        self._last_end: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # n-grams ending at positions <= this are in the table

    def draft(self, k: int) -> list[int]:
        ids, n_ids = self.ids, len(self.ids)
        # Index every n-gram ending before the current end (the suffix itself is
        # not an earlier occurrence of itself).
        for end in range(self._indexed + 1, n_ids):
            for n in range(1, min(self.max_ngram, end) + 1):
                self._last_end[tuple(ids[end - n : end])] = end
        self._indexed = max(self._indexed, n_ids - 1)
        if k <= 0:
            return []
        for n in range(min(self.max_ngram, n_ids - 1), 0, -1):
            found = self._last_end.get(tuple(ids[n_ids - n :]))
            if found is not None:
                return ids[found : found + k]
        return []


class NgramDrafter:
    """A ``Drafter`` proposing what followed the sequence's suffix earlier on (``NgramIndex``)."""

    def __init__(self, max_ngram: int = DEFAULT_NGRAM) -> None:
        check_int("max_ngram", max_ngram, 1)
        self.max_ngram = max_ngram
        self._index: NgramIndex | None = None

    def propose(self, ids: list[int], k: int) -> Draft:
        if self._index is None or self._index.ids is not ids:
            self._index = NgramIndex(ids, self.max_ngram)
        return Draft(self._index.draft(k))

    def accepted(self, n: int) -> None:
        """Nothing to undo: the index reads the sequence itself."""


@torch.no_grad()
def lookup_stream(
    model: CausalStepper[Any],
    prompt_ids: Tensor,
    max_new_tokens: int,
    *,
    num_tokens: int = 10,
    max_ngram: int = DEFAULT_NGRAM,
    sampling: Sampling | None = None,
    eos_id: int | None = None,
    stepper: AnyStepper | None = None,
    stats: SpeculativeStats | None = None,
) -> Iterator[Tensor]:
    """The continuation of ``prompt_ids`` ``(1, T)``, yielded as ``(1,)`` tokens.

    Args:
        model: a ``CausalStepper`` that is a ``Verifier`` (``DecoderOnlyLM``), eval mode.
        max_new_tokens: tokens to yield at most; ``eos_id``: stop after it.
        num_tokens: the draft's length ``k`` (>= 1).
        max_ngram: the longest suffix looked up (>= 1).
        sampling: greedy (the default) or sampling's settings and generator.
        stepper: what steps ``model`` on the rounds without a draft (as in ``stream``).
        stats: filled in with forwards, drafts and acceptances.
    """
    drafter = NgramDrafter(max_ngram)
    yield from speculative_stream(model, prompt_ids, max_new_tokens, drafter,
                                  num_tokens=num_tokens, sampling=sampling, eos_id=eos_id,
                                  stepper=stepper, stats=stats)  # fmt: skip
