"""Token-budget batches of an encoded parallel corpus, epoch after epoch, resumable mid-epoch.

``PairBatches`` turns ``TokenPairs`` (in memory, or memory-mapped from a
prepared cache: the code is the same) into an endless stream of global
batches: pairs longer than ``max_len`` are left out (and counted), the
``TokenBudgetSampler`` cuts each epoch on the length array alone, and every
batch is gathered from the arrays when it is needed. Its state is
``{"epoch", "batch_in_epoch"}``, so a resumed run continues with the very
next batch.

Several corpora (``data.corpora``) with weights: an epoch holds as many
pairs as all the corpora together, each corpus supplying its share
(``weight / sum of weights``) of them, drawn afresh every epoch (without
repetition up to the corpus's size; a corpus smaller than its share is used
whole, more than once), as streaming mixes them (``attnkit.data.streaming``).
The draw depends only on ``(seed, epoch)``, so resume stays exact.

A global batch is ``(pairs, rows)``: the rows of a ``TokenPairs`` to
collate. The training task shares the rows out among data-parallel ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, cast

import numpy as np

from attnkit.data.batching import TokenBudgetSampler
from attnkit.data.token_store import ConcatPairs, TokenPairs, id_dtype
from attnkit.data.tokenizers import Tokenizer

GlobalBatch = tuple[TokenPairs | ConcatPairs, np.ndarray]


class BatchStream(Protocol):
    """An endless, resumable source of global batches (``PairBatches``, ``PairStream``)."""

    def set_max_tokens(self, max_tokens: int) -> None:
        """The padded-token budget of a global batch; called before iterating."""
        ...

    def __iter__(self) -> Iterator[GlobalBatch]:
        """Global batches from where the state stands; advances the state."""
        ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state: dict[str, object]) -> None: ...

    def progress(self) -> dict[str, object]:
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
        shares: each corpus's share of an epoch (``None``: one corpus).
    """

    def __init__(
        self,
        pairs: TokenPairs | Sequence[TokenPairs],
        *,
        max_len: int,
        seed: int,
        weights: Sequence[float] | None = None,
    ):
        parts = [pairs] if isinstance(pairs, TokenPairs) else list(pairs)
        self.pairs: TokenPairs | ConcatPairs = parts[0] if len(parts) == 1 else ConcatPairs(parts)
        self.seed, self.max_len = seed, max_len
        costs = [p.costs() for p in parts]  # (N,) max(source + 1, target + 1)
        self.costs = costs[0] if len(parts) == 1 else np.concatenate(costs)
        fits = self.costs <= max_len
        n_kept = int(fits.sum())
        self.kept = None if n_kept == len(self.costs) else np.flatnonzero(fits)
        self.dropped = len(self.costs) - n_kept
        self.longest_src = self._longest([p.src.lengths for p in parts])
        self.longest_tgt = self._longest([p.tgt.lengths for p in parts])
        for p in parts:  # the length arrays were read through: hand their pages back
            p.release()
        self.shares: np.ndarray | None = None
        if len(parts) > 1:
            w = np.asarray(weights if weights is not None else [1.0] * len(parts), np.float64)
            self.shares = w / w.sum()
            edges = np.cumsum([0] + [len(p) for p in parts])
            self._part_kept = [np.flatnonzero(fits[a:b]) + a for a, b in zip(edges, edges[1:])]
        self.sampler: TokenBudgetSampler | None = None
        self.max_tokens = 0
        self.epoch = 0
        self.batch_in_epoch = 0  # batches of this epoch already taken (for resume)

    def set_max_tokens(self, max_tokens: int) -> None:
        """The padded-token budget of a global batch (the trainer knows the world size)."""
        self.max_tokens = max_tokens
        self.sampler = self._sampler(0)  # refuses a pair longer than max_tokens now

    def _sampler(self, epoch: int) -> TokenBudgetSampler:
        if self.sampler is not None and self.shares is None:
            return self.sampler  # one corpus: the same examples every epoch
        indices = self.kept if self.shares is None else self._epoch_indices(epoch)
        return TokenBudgetSampler(
            self.costs, max_tokens=self.max_tokens, indices=indices, seed=self.seed
        )

    def _epoch_indices(self, epoch: int) -> np.ndarray:
        """Epoch ``epoch``'s pairs: each corpus's share of them, drawn afresh."""
        assert self.shares is not None
        rng = np.random.default_rng([self.seed, epoch, 24])  # not the sampler's stream
        total = self.num_kept
        chosen = []
        for kept, share in zip(self._part_kept, self.shares.tolist()):
            n = int(round(total * share))
            if n and len(kept):
                whole, rest = divmod(n, len(kept))
                chosen += [kept] * whole + [rng.choice(kept, rest, replace=False)]
        return np.concatenate(chosen)

    @property
    def num_kept(self) -> int:
        return len(self.pairs) - self.dropped

    def _longest(self, lengths: list[np.ndarray]) -> int:
        every = lengths[0] if len(lengths) == 1 else np.concatenate(lengths)
        chosen = every if self.kept is None else every[self.kept]
        return int(chosen.max(initial=0)) + 1

    def __iter__(self) -> Iterator[GlobalBatch]:
        if self.sampler is None:
            raise RuntimeError("PairBatches: call set_max_tokens before iterating")
        while True:
            sampler = self._sampler(self.epoch)
            sampler.set_epoch(self.epoch)
            plan = sampler.plan()
            for i in range(self.batch_in_epoch, len(plan)):
                self.batch_in_epoch = i + 1
                yield self.pairs, plan.batch(i)
            self.epoch += 1
            self.batch_in_epoch = 0

    def state_dict(self) -> dict[str, object]:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch}

    def load_state_dict(self, state: dict[str, object]) -> None:
        # the ints ``state_dict`` saved (the casts only tell mypy)
        self.epoch = int(cast(int, state["epoch"]))
        self.batch_in_epoch = int(cast(int, state["batch_in_epoch"]))

    def progress(self) -> dict[str, object]:
        return {"epoch": self.epoch}

    def describe(self) -> str:
        mixed = ""
        if isinstance(self.pairs, ConcatPairs) and self.shares is not None:
            shares = ", ".join(f"{w:.3g}" for w in self.shares)
            mixed = f" from {len(self.pairs.parts)} corpora (shares {shares})"
        return (
            f"{len(self.pairs)} training pairs{mixed} ({self.dropped} longer than "
            f"data.max_len={self.max_len} dropped"
        )
