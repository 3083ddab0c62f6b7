"""Token-budget batching: batches of similar length whose padded size fits ``max_tokens``.

The paper (section 5.1) batches "sentence pairs ... by approximate sequence
length", about 25,000 source and 25,000 target tokens per batch. Here a batch
costs ``batch_size * max(longest source, longest target)``: the token count of
the larger padded tensor, which is what bounds memory.

Lengths are the lengths as collated (e.g. source tokens + EOS, BOS + target).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler

from attnkit.errors import UsageError


def _as_lengths(name: str, lengths: Sequence[int]) -> np.ndarray:
    arr = np.asarray(lengths, dtype=np.int64)
    if arr.ndim != 1:
        raise UsageError(f"{name}: expected a flat sequence of lengths")
    if arr.size and arr.min() < 0:
        raise UsageError(f"{name}: lengths must be >= 0")
    return arr


def _pair_lengths(src_lengths: Sequence[int], tgt_lengths: Sequence[int] | None) -> np.ndarray:
    """(N,) cost length of each example: max of its source and target lengths."""
    src = _as_lengths("src_lengths", src_lengths)
    if tgt_lengths is None:
        return src
    tgt = _as_lengths("tgt_lengths", tgt_lengths)
    if len(src) != len(tgt):
        raise UsageError(f"src_lengths has {len(src)} entries but tgt_lengths has {len(tgt)}")
    return np.maximum(src, tgt)


def filter_by_length(
    src_lengths: Sequence[int], tgt_lengths: Sequence[int] | None = None, *, max_len: int
) -> tuple[list[int], int]:
    """Indices of examples whose source and target both have at most ``max_len`` tokens.

    Returns ``(kept_indices, n_dropped)``; pass ``kept_indices`` to ``TokenBudgetSampler``.
    """
    if max_len < 1:
        raise UsageError(f"max_len must be >= 1, got {max_len}")
    lengths = _pair_lengths(src_lengths, tgt_lengths)
    kept = np.flatnonzero(lengths <= max_len)
    return kept.tolist(), int(len(lengths) - len(kept))


class TokenBudgetSampler(Sampler[list[int]]):
    """Yields batches (lists of dataset indices) whose padded token count is <= ``max_tokens``.

    Each epoch: examples are sorted by length (equal lengths in a random order,
    so batch contents vary between epochs), cut greedily into batches, and the
    batch order is shuffled. Everything depends only on ``(seed, epoch)``; call
    ``set_epoch(e)`` before each epoch, as with ``DistributedSampler``.

    DDP: with ``world_size > 1`` every rank builds the same batch list and takes
    every ``world_size``-th batch starting at ``rank``, so shards are disjoint.
    The last ``len(batches) % world_size`` batches are **dropped** so that every
    rank runs the same number of steps (an uneven count would hang DDP); the
    batch order is reshuffled each epoch, so different examples miss out.
    """

    def __init__(
        self,
        src_lengths: Sequence[int],
        tgt_lengths: Sequence[int] | None = None,
        *,
        max_tokens: int,
        indices: Sequence[int] | None = None,
        max_sentences: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        if max_tokens < 1:
            raise UsageError(f"max_tokens must be >= 1, got {max_tokens}")
        if max_sentences is not None and max_sentences < 1:
            raise UsageError(f"max_sentences must be >= 1, got {max_sentences}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise UsageError(
                f"rank must be in [0, world_size); got rank={rank}, world_size={world_size}"
            )
        lengths = _pair_lengths(src_lengths, tgt_lengths)
        self.indices = (
            np.arange(len(lengths)) if indices is None else np.asarray(indices, dtype=np.int64)
        )
        if self.indices.size and not (
            0 <= self.indices.min() and self.indices.max() < len(lengths)
        ):
            raise UsageError(f"indices must be in [0, {len(lengths)})")
        self.lengths = lengths[self.indices]  # (n,) aligned with self.indices
        too_long = np.flatnonzero(self.lengths > max_tokens)
        if too_long.size:
            i = int(self.indices[too_long[0]])
            raise UsageError(
                f"example {i} has {int(lengths[i])} tokens, more than max_tokens={max_tokens}; "
                f"raise max_tokens or drop long examples first (filter_by_length, data.max_len)"
            )
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.shuffle, self.seed = shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.epoch = 0
        # Batch boundaries depend only on the sorted lengths, never on the tie order,
        # so the batch count is the same every epoch.
        self._num_batches = len(self._batches(np.argsort(self.lengths, kind="stable")))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        """Batches this rank yields per epoch."""
        return self._num_batches // self.world_size

    def _batches(self, order: np.ndarray) -> list[list[int]]:
        """Greedily cut positions ``order`` (sorted by length) into batches within the budget."""
        batches: list[list[int]] = []
        current: list[int] = []
        longest = 0
        for pos in order.tolist():
            n = int(self.lengths[pos])
            grown = max(longest, n)
            full = self.max_sentences is not None and len(current) >= self.max_sentences
            if current and (full or grown * (len(current) + 1) > self.max_tokens):
                batches.append(current)
                current, grown = [], n
            current.append(pos)
            longest = grown
        if current:
            batches.append(current)
        return batches

    def epoch_batches(self) -> list[list[int]]:
        """All ranks' batches of the current epoch, in order (dataset indices)."""
        rng = np.random.default_rng([self.seed, self.epoch])
        if self.shuffle:
            # Random order first, then a stable sort: equal lengths stay shuffled.
            order = rng.permutation(len(self.lengths))
            order = order[np.argsort(self.lengths[order], kind="stable")]
        else:
            order = np.argsort(self.lengths, kind="stable")
        batches = self._batches(order)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return [self.indices[b].tolist() for b in batches]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.epoch_batches()
        usable = len(batches) - len(batches) % self.world_size
        yield from batches[self.rank : usable : self.world_size]
