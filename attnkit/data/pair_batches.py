"""Token-budget batches of an encoded parallel corpus, epoch after epoch, resumable mid-epoch.

``PairBatches`` turns ``TokenPairs`` (in memory, or memory-mapped from a
prepared cache: the code is the same) into an endless stream of global
batches: pairs longer than ``max_len`` are left out (and counted), the
``TokenBudgetSampler`` cuts each epoch on the length array alone, and every
batch is gathered from the arrays when it is needed. Its state is
``{"epoch", "batch_in_epoch"}``, so a resumed run continues with the very
next batch.

A global batch is ``(pairs, rows)``: the rows of a ``TokenPairs`` to
collate. The training task shares the rows out among data-parallel ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from attnkit.data.batching import TokenBudgetSampler
from attnkit.data.token_store import TokenPairs, id_dtype
from attnkit.data.tokenizers import Tokenizer

GlobalBatch = tuple[TokenPairs, np.ndarray]


class BatchStream(Protocol):
    """An endless, resumable source of global batches (``PairBatches``, ``PairStream``)."""

    def set_max_tokens(self, max_tokens: int) -> None:
        """The padded-token budget of a global batch; called before iterating."""
        ...

    def __iter__(self) -> Iterator[GlobalBatch]:
        """Global batches from where the state stands; advances the state."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def progress(self) -> dict[str, Any]:
        """Fields for the training log (the epoch)."""
        ...

    def describe(self) -> str:
        """The training data, for the line printed at the start; the task closes the
        parenthesis it opens (``"29000 training pairs (12 longer than ... dropped"``)."""
        ...


def encode_pairs(pairs: Sequence[tuple[str, str]], tokenizer: Tokenizer) -> TokenPairs:
    """``pairs`` encoded in memory (the ``data.loading: memory`` path, and tests)."""
    src = tokenizer.encode_batch([s for s, _ in pairs])
    tgt = tokenizer.encode_batch([t for _, t in pairs])
    return TokenPairs.from_lists(src, tgt, id_dtype(tokenizer.vocab_size))


class PairBatches:
    """Global token-budget batches of ``pairs`` (see the module doc).

    Attributes:
        kept: indices of the pairs within ``max_len`` (``None``: all of them).
        dropped: how many pairs are longer than ``max_len``.
        longest_src / longest_tgt: the longest kept source (+ EOS) and target
            (+ BOS), in tokens, for checking that the model's positions reach.
    """

    def __init__(self, pairs: TokenPairs, *, max_len: int, seed: int):
        self.pairs, self.seed, self.max_len = pairs, seed, max_len
        self.costs = pairs.costs()  # (N,) max(source + 1, target + 1)
        fits = self.costs <= max_len
        n_kept = int(fits.sum())
        self.kept = None if n_kept == len(self.costs) else np.flatnonzero(fits)
        self.dropped = len(self.costs) - n_kept
        self.longest_src = self._longest(pairs.src.lengths)
        self.longest_tgt = self._longest(pairs.tgt.lengths)
        self.sampler: TokenBudgetSampler | None = None
        self.epoch = 0
        self.batch_in_epoch = 0  # batches of this epoch already taken (for resume)

    def set_max_tokens(self, max_tokens: int) -> None:
        """The padded-token budget of a global batch (the trainer knows the world size)."""
        self.sampler = TokenBudgetSampler(
            self.costs, max_tokens=max_tokens, indices=self.kept, seed=self.seed
        )

    @property
    def num_kept(self) -> int:
        return len(self.pairs) - self.dropped

    def _longest(self, lengths: np.ndarray) -> int:
        chosen = lengths if self.kept is None else lengths[self.kept]
        return int(chosen.max(initial=0)) + 1

    def __iter__(self) -> Iterator[GlobalBatch]:
        if self.sampler is None:
            raise RuntimeError("PairBatches: call set_max_tokens before iterating")
        while True:
            self.sampler.set_epoch(self.epoch)
            plan = self.sampler.plan()
            for i in range(self.batch_in_epoch, len(plan)):
                self.batch_in_epoch = i + 1
                yield self.pairs, plan.batch(i)
            self.epoch += 1
            self.batch_in_epoch = 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.batch_in_epoch = int(state["batch_in_epoch"])

    def progress(self) -> dict[str, Any]:
        return {"epoch": self.epoch}

    def describe(self) -> str:
        return (
            f"{len(self.pairs)} training pairs ({self.dropped} longer than "
            f"data.max_len={self.max_len} dropped"
        )
