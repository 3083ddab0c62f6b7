"""Streaming corpora: read, encode and batch on the fly, mixing corpora by weight (eole's way).

For corpora too large to prepare (or by choice, ``data.loading: streaming``).
Each corpus (``data.corpora: [{dir, weight}]``, or ``data.dir`` alone) is
read in order, its inputs in a new seeded order every pass, encoded
``CHUNK_LINES`` pairs at a time with the tokenizer's batch encoder (all
cores); pairs longer than ``max_len`` are dropped. Training draws windows
of ``buffer`` pairs: how many come from each corpus is a seeded multinomial
draw in proportion to the weights, so over a run each corpus supplies its
share of the pairs (a corpus smaller than its share is read again, a larger
one is read partly, as eole and OpenNMT-py do). A window is shuffled,
sorted by length (ties random) and cut into token-budget batches whose
order is shuffled: the ``TokenBudgetSampler`` on the window. Memory holds
one window and one encoded chunk per corpus, whatever the corpus size.

Resume is exact: the state is the window number, the batches of it already
taken, and where each corpus stood when the window began (pass, input,
record); a resumed run re-reads from there (skipping records without
encoding them) and rebuilds the same window.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from attnkit.data.batching import TokenBudgetSampler
from attnkit.data.formats import Input, PairChunk, iter_pair_chunks
from attnkit.data.pair_batches import GlobalBatch
from attnkit.data.token_store import TokenPairs, id_dtype
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import DataError, UsageError


def _skip(chunks: Iterator[PairChunk], records: int) -> Iterator[tuple[int, PairChunk]]:
    """``(number of the chunk's first record, chunk)``, from record ``records`` on."""
    start = 0
    for chunk in chunks:
        end = start + len(chunk)
        if end > records:
            cut = max(0, records - start)
            if cut:
                chunk = PairChunk(chunk.src[cut:], chunk.tgt[cut:])
            yield start + cut, chunk
        start = end


class _Corpus:
    """One corpus read pass after pass, encoded a chunk at a time.

    The position is ``(pass, input, record)``: ``record`` counts the pairs of
    the current input (in this pass's input order) already handed out or
    dropped, so reading can restart right there.
    """

    def __init__(
        self,
        inputs: Sequence[Input],
        number: int,
        tokenizer: Tokenizer,
        *,
        max_len: int,
        skip_empty: bool,
        seed: int,
    ):
        self.inputs, self.number, self.tokenizer = list(inputs), number, tokenizer
        self.max_len, self.skip_empty, self.seed = max_len, skip_empty, seed
        self.dropped_long = 0
        self.restore({"pass": 0, "input": 0, "record": 0})

    def state(self) -> dict[str, int]:
        return {"pass": self.passes, "input": self.input, "record": self.record}

    def restore(self, state: dict[str, int]) -> None:
        self.passes, self.input, self.record = (int(state[k]) for k in ("pass", "input", "record"))
        self.kept_this_pass = 1 if self.input or self.record else 0
        self._chunks: Iterator[tuple[int, PairChunk]] | None = None
        self._encoded: TokenPairs | None = None
        self._rows = np.empty(0, np.int64)  # kept rows of the encoded chunk, not yet taken
        self._records = np.empty(0, np.int64)  # their record numbers

    def _order(self) -> list[Input]:
        rng = np.random.default_rng([self.seed, self.number, self.passes])
        return [self.inputs[i] for i in rng.permutation(len(self.inputs))]

    def _next_chunk(self) -> tuple[int, PairChunk]:
        while True:
            if self._chunks is None:
                item = self._order()[self.input]
                chunks = iter_pair_chunks([item], skip_empty=self.skip_empty)
                self._chunks = _skip(chunks, self.record)
            found = next(self._chunks, None)
            if found is not None:
                return found
            self._chunks, self.record = None, 0
            self.input += 1
            if self.input == len(self.inputs):
                if not self.kept_this_pass:
                    where = ", ".join(str(i) for i in self.inputs)
                    raise DataError(f"{where}: no pair within data.max_len={self.max_len}")
                self.passes, self.input, self.kept_this_pass = self.passes + 1, 0, 0

    def _refill(self) -> None:
        first, chunk = self._next_chunk()
        ids = self.tokenizer.encode_batch(chunk.src + chunk.tgt)
        dtype = id_dtype(self.tokenizer.vocab_size)
        self._encoded = TokenPairs.from_lists(ids[: len(chunk)], ids[len(chunk) :], dtype)
        fits = np.flatnonzero(self._encoded.costs() <= self.max_len)
        self.dropped_long += len(chunk) - len(fits)
        self.kept_this_pass += len(fits)
        self._rows, self._records = fits, first + fits
        self.record = first + len(chunk)  # if every pair of the chunk is dropped

    def take(self, n: int) -> list[tuple[TokenPairs, np.ndarray]]:
        """The next ``n`` pairs within ``max_len``, as rows of encoded chunks."""
        parts = []
        while n > 0:
            if not len(self._rows):
                self._refill()
                continue
            k = min(n, len(self._rows))
            assert self._encoded is not None
            parts.append((self._encoded, self._rows[:k]))
            self.record = int(self._records[k - 1]) + 1
            self._rows, self._records = self._rows[k:], self._records[k:]
            n -= k
        return parts


class PairStream:
    """Global token-budget batches streamed from weighted corpora (see the module doc)."""

    def __init__(
        self,
        corpora: Sequence[Sequence[Input]],
        weights: Sequence[float],
        tokenizer: Tokenizer,
        *,
        max_len: int,
        skip_empty: bool,
        buffer: int,
        seed: int,
    ):
        if len(corpora) != len(weights) or not corpora:
            raise UsageError(f"{len(corpora)} corpora but {len(weights)} weights")
        if min(weights) <= 0:
            raise UsageError(f"corpus weights must be > 0, got {list(weights)}")
        if buffer < 1:
            raise UsageError(f"buffer must be >= 1, got {buffer}")
        self.corpora = [
            _Corpus(inputs, i, tokenizer, max_len=max_len, skip_empty=skip_empty, seed=seed)
            for i, inputs in enumerate(corpora)
        ]
        self.shares = np.asarray(weights, dtype=np.float64) / float(sum(weights))
        self.max_len, self.buffer, self.seed = max_len, buffer, seed
        self.max_tokens: int | None = None
        self.window = 0  # windows begun
        self.batch_in_window = 0  # batches of the current window already taken
        self._starts = [c.state() for c in self.corpora]  # where the window began

    def set_max_tokens(self, max_tokens: int) -> None:
        if self.max_len + 1 > max_tokens:  # max(source + EOS, BOS + target) <= max_len
            raise UsageError(
                f"data.max_len={self.max_len} allows pairs longer than max_tokens={max_tokens} "
                "can batch; raise train.max_tokens or lower data.max_len"
            )
        self.max_tokens = max_tokens

    def _window(self, number: int) -> TokenPairs:
        """Window ``number``: ``buffer`` pairs drawn from the corpora by weight."""
        counts = np.random.default_rng([self.seed, number]).multinomial(self.buffer, self.shares)
        parts = [p for corpus, n in zip(self.corpora, counts.tolist()) for p in corpus.take(n)]
        return TokenPairs.concat(parts)

    def __iter__(self) -> Iterator[GlobalBatch]:
        if self.max_tokens is None:
            raise RuntimeError("PairStream: call set_max_tokens before iterating")
        for corpus, start in zip(self.corpora, self._starts):
            corpus.restore(start)
        while True:
            self._starts = [c.state() for c in self.corpora]
            window = self._window(self.window)
            sampler = TokenBudgetSampler(window.costs(), max_tokens=self.max_tokens,
                                         seed=self.seed)  # fmt: skip
            sampler.set_epoch(self.window)
            plan = sampler.plan()
            for i in range(self.batch_in_window, len(plan)):
                self.batch_in_window = i + 1
                yield window, plan.batch(i)
            self.window += 1
            self.batch_in_window = 0

    def state_dict(self) -> dict[str, object]:
        return {"window": self.window, "batch_in_window": self.batch_in_window,
                "corpora": [dict(s) for s in self._starts]}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["corpora"]) != len(self.corpora):
            raise DataError(
                f"the checkpoint streamed {len(state['corpora'])} corpora, the config names "
                f"{len(self.corpora)}; resume with the same data.corpora"
            )
        self.window = int(state["window"])
        self.batch_in_window = int(state["batch_in_window"])
        self._starts = [dict(s) for s in state["corpora"]]

    def progress(self) -> dict[str, object]:
        return {"window": self.window, "epoch": min(s["pass"] for s in self._starts)}

    def describe(self) -> str:
        weights = ", ".join(f"{w:.3g}" for w in self.shares)
        return (
            f"training pairs streamed from {len(self.corpora)} corpora (shares {weights}), "
            f"{self.buffer} at a time (longer than data.max_len={self.max_len} dropped"
        )
