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


def _as_lengths(name: str, lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(lengths)
    if arr.dtype.kind not in "iu":  # lists of ints (or empty) come in as int64
        arr = np.asarray(lengths, dtype=np.int64)
    if arr.ndim != 1:
        raise UsageError(f"{name}: expected a flat sequence of lengths")
    if arr.size and arr.dtype.kind == "i" and arr.min() < 0:
        raise UsageError(f"{name}: lengths must be >= 0")
    return arr


def _compact(lengths: np.ndarray) -> np.ndarray:
    """``lengths`` in the smallest unsigned dtype that holds them (the sort is a radix sort
    on 16-bit keys, and 43M lengths take 87 MB, not 348)."""
    top = int(lengths.max(initial=0))
    dtype = np.uint16 if top < 1 << 16 else np.uint32 if top < 1 << 32 else np.uint64
    return lengths.astype(dtype, copy=False)


def _index_dtype(n: int) -> type:
    return np.uint32 if n < 1 << 32 else np.int64


def _pair_lengths(
    src_lengths: Sequence[int] | np.ndarray, tgt_lengths: Sequence[int] | np.ndarray | None
) -> np.ndarray:
    """(N,) cost length of each example: max of its source and target lengths."""
    src = _as_lengths("src_lengths", src_lengths)
    if tgt_lengths is None:
        return _compact(src)
    tgt = _as_lengths("tgt_lengths", tgt_lengths)
    if len(src) != len(tgt):
        raise UsageError(f"src_lengths has {len(src)} entries but tgt_lengths has {len(tgt)}")
    return _compact(np.maximum(src, tgt))


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


def batch_starts(
    sorted_lengths: np.ndarray, max_tokens: int, max_sentences: int | None = None
) -> np.ndarray:
    """Where greedy cutting starts each batch of ``sorted_lengths`` (ascending) ``(n,)``.

    Greedy: add the next example while ``longest * count <= max_tokens`` (and
    ``count <= max_sentences``). Lengths ascend, so the newest example is the
    longest and a run of equal lengths ``v`` fills batches of
    ``m = max_tokens // v`` examples: one loop step per distinct length, not
    per example. Returns ``(num_batches,)`` start positions (int64).
    """
    values, counts = np.unique(sorted_lengths, return_counts=True)
    starts = [np.zeros(min(1, len(sorted_lengths)), np.int64)]
    pos = size = 0  # examples placed; size of the open batch
    for v, c in zip(values.tolist(), counts.tolist()):
        m = max_tokens // v if v > 0 else pos + c + 1  # length 0 costs nothing
        if max_sentences is not None:
            m = min(m, max_sentences)
        take = min(c, max(0, m - size))  # joins the open batch
        if take < c:  # the rest opens new batches of m each
            new = np.arange(pos + take, pos + c, m, dtype=np.int64)
            starts.append(new)
            size = pos + c - int(new[-1])
        else:
            size += c
        pos += c
    return np.concatenate(starts)


class EpochPlan:
    """One epoch's batches: dataset indices in batch order, cut at ``starts``.

    ``order`` ``(n,)`` holds the examples sorted by length, ``starts``
    ``(num_batches + 1,)`` where each batch begins in it (and the end), and
    ``batch_order`` the shuffled order the batches are taken in. Batch ``i``
    is ``indices[order[starts[b]:starts[b + 1]]]`` with ``b = batch_order[i]``,
    built on demand, so an epoch of 40M examples costs a few arrays, not
    40M Python ints. ``indices`` ``None``: every example, in dataset order.
    """

    def __init__(
        self,
        order: np.ndarray,
        starts: np.ndarray,
        batch_order: np.ndarray,
        indices: np.ndarray | None,
    ):
        self.order, self.starts, self.batch_order = order, starts, batch_order
        self.indices = indices

    def __len__(self) -> int:
        return len(self.batch_order)

    def batch(self, i: int) -> np.ndarray:
        """Dataset indices ``(B,)`` (int64) of the ``i``-th batch of the epoch."""
        b = int(self.batch_order[i])
        positions = self.order[self.starts[b] : self.starts[b + 1]]
        chosen = positions if self.indices is None else self.indices[positions]
        return chosen.astype(np.int64)


class TokenBudgetSampler(Sampler[list[int]]):
    """Yields batches (lists of dataset indices) whose padded token count is <= ``max_tokens``.

    Each epoch: examples are sorted by length (equal lengths in a random order,
    so batch contents vary between epochs), cut greedily into batches, and the
    batch order is shuffled. Everything depends only on ``(seed, epoch)``; call
    ``set_epoch(e)`` before each epoch, as with ``DistributedSampler``.
    ``plan()`` gives the epoch as a few NumPy arrays (``EpochPlan``), which is
    what a corpus of tens of millions of pairs needs; iterating gives lists.

    DDP: with ``world_size > 1`` every rank builds the same batch list and takes
    every ``world_size``-th batch starting at ``rank``, so shards are disjoint.
    The last ``len(batches) % world_size`` batches are **dropped** so that every
    rank runs the same number of steps (an uneven count would hang DDP); the
    batch order is reshuffled each epoch, so different examples miss out.
    """

    def __init__(
        self,
        src_lengths: Sequence[int] | np.ndarray,
        tgt_lengths: Sequence[int] | np.ndarray | None = None,
        *,
        max_tokens: int,
        indices: Sequence[int] | np.ndarray | None = None,
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
        n_all = len(lengths)
        # The examples batched (None: all of them, without an arange of N to say so).
        self.indices: np.ndarray | None = None
        if indices is None:
            self.lengths = lengths  # (n,) aligned with the examples batched
        else:
            chosen = np.asarray(indices, dtype=np.int64)
            if chosen.size and not (0 <= chosen.min() and chosen.max() < n_all):
                raise UsageError(f"indices must be in [0, {n_all})")
            self.indices = chosen.astype(_index_dtype(n_all))
            self.lengths = lengths[self.indices]
        too_long = np.flatnonzero(self.lengths > max_tokens)
        if too_long.size:
            i = int(too_long[0] if self.indices is None else self.indices[too_long[0]])
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
        self._num_batches = len(self._starts(np.sort(self.lengths)))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        """Batches this rank yields per epoch."""
        return self._num_batches // self.world_size

    def _starts(self, sorted_lengths: np.ndarray) -> np.ndarray:
        return batch_starts(sorted_lengths, self.max_tokens, self.max_sentences)

    def plan(self) -> EpochPlan:
        """All ranks' batches of the current epoch, in order."""
        n = len(self.lengths)
        rng = np.random.default_rng([self.seed, self.epoch])
        if self.shuffle:
            # Random order first, then a stable sort: equal lengths stay shuffled.
            # (shuffle(arange) is permutation(n), in a 4-byte dtype.)
            order: np.ndarray = np.arange(n, dtype=_index_dtype(n))
            rng.shuffle(order)
            order = order[np.argsort(self.lengths[order], kind="stable")]
        else:
            order = np.argsort(self.lengths, kind="stable").astype(_index_dtype(n))
        starts = self._starts(self.lengths[order])
        batch_order = rng.permutation(len(starts)) if self.shuffle else np.arange(len(starts))
        bounds = np.append(starts, n)
        return EpochPlan(order, bounds, batch_order, self.indices)

    def epoch_batches(self) -> list[list[int]]:
        """All ranks' batches of the current epoch, in order (dataset indices)."""
        plan = self.plan()
        return [plan.batch(i).tolist() for i in range(len(plan))]

    def __iter__(self) -> Iterator[list[int]]:
        plan = self.plan()
        usable = len(plan) - len(plan) % self.world_size
        for i in range(self.rank, usable, self.world_size):
            yield plan.batch(i).tolist()
