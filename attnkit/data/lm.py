"""Language-model data: one long token stream, cut into random contiguous blocks.

As in nanoGPT: the whole text is encoded once into a 1-D tensor of ids, the
first 90% is the training split and the last 10% the validation split
(``split_ids``), and a training batch is ``batch_size`` blocks of
``block_size + 1`` tokens starting at uniformly random offsets; the inputs
are the first ``block_size`` tokens and the targets the same block shifted by
one. Offsets come from a seeded ``torch.Generator``, so batches are
reproducible. Validation uses non-overlapping blocks in order
(``LMBlocks.sequential``), so its loss is deterministic too.

A prepared corpus (``attnkit.data.prepared``) is the same stream as a
memory-mapped NumPy array (``uint16``/``uint32``): ``LMBlocks`` gathers the
blocks from it, with the same offsets and so the same batches.

Shapes: ``N`` tokens in a split, ``B`` batch, ``T`` block size (context).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnkit.data.readers import read_text
from attnkit.data.tokenizers import BPETokenizer, CharTokenizer, Tokenizer
from attnkit.errors import DataError, UsageError


def encode_text(text: str, tokenizer: Tokenizer) -> Tensor:
    """The whole ``text`` as one ``(N,)`` long tensor of ids (no BOS/EOS)."""
    return torch.tensor(tokenizer.encode(text), dtype=torch.long)


def split_ids(
    ids: Tensor | np.ndarray, valid_fraction: float = 0.1
) -> tuple[Tensor | np.ndarray, Tensor | np.ndarray]:
    """``(train, valid)``: the first ``1 - valid_fraction`` of ``ids`` and the rest.

    The boundary is ``int(N * (1 - valid_fraction))``, as nanoGPT's
    ``prepare.py``; both parts are views of ``ids``.
    """
    if not 0.0 <= valid_fraction < 1.0:
        raise UsageError(f"valid_fraction must be in [0, 1), got {valid_fraction!r}")
    boundary = int(num_tokens(ids) * (1.0 - valid_fraction))
    return ids[:boundary], ids[boundary:]


def train_lm_tokenizer(text: str, kind: str = "char", vocab_size: int | None = None) -> Tokenizer:
    """A ``"char"`` (every character seen) or ``"bpe"`` tokenizer trained on ``text``."""
    if kind == "char":
        return CharTokenizer.train([text], vocab_size=vocab_size)
    if kind == "bpe":
        if vocab_size is None:
            raise UsageError("vocab_size: a BPE tokenizer needs a vocabulary size")
        # Train on lines: HF's trainer handles many short texts better than one huge one.
        return BPETokenizer.train(text.split("\n"), vocab_size)
    raise UsageError(f"kind: expected 'char' or 'bpe', got {kind!r}")


@dataclass
class LMCorpus:
    """A text file's token ids, split for training and validation.

    In memory (``load_lm_corpus``) the splits are long tensors; prepared
    (``attnkit.data.prepared``), views of a memory-mapped NumPy array.
    """

    train: Tensor | np.ndarray
    valid: Tensor | np.ndarray
    tokenizer: Tokenizer


def num_tokens(ids: Tensor | np.ndarray) -> int:
    return int(ids.numel()) if isinstance(ids, Tensor) else len(ids)


def as_tensor(ids: Tensor | np.ndarray, limit: int | None = None) -> Tensor:
    """The first ``limit`` ids (all: ``None``) as a long tensor."""
    part = ids[:limit]
    return part.long() if isinstance(part, Tensor) else torch.from_numpy(part.astype(np.int64))


def load_lm_corpus(
    path: str | Path,
    tokenizer: Tokenizer | None = None,
    *,
    kind: str = "char",
    vocab_size: int | None = None,
    valid_fraction: float = 0.1,
) -> LMCorpus:
    """Read ``path`` (UTF-8), encode it and split it 90/10 (by default).

    Without a ``tokenizer``, one of ``kind`` is trained on the whole file (for
    a char vocabulary this only fixes the alphabet, as nanoGPT does).
    """
    text = read_text(path)
    tokenizer = tokenizer or train_lm_tokenizer(text, kind, vocab_size)
    train, valid = split_ids(encode_text(text, tokenizer), valid_fraction)
    return LMCorpus(train=train, valid=valid, tokenizer=tokenizer)


class LMBlocks:
    """Blocks of ``block_size`` inputs and their next-token targets from one split.

    ``ids`` is a tensor or a NumPy array (memory-mapped: blocks are read
    from the file as they are drawn); ``release``, if given, is called after
    every ``release_every`` blocks so the pages read can be handed back.
    ``size_name``: what the user sets to change ``block_size`` (``model.max_len``,
    ``--context``), named in the error.
    """

    def __init__(
        self,
        ids: Tensor | np.ndarray,
        block_size: int,
        *,
        name: str = "data",
        size_name: str = "block_size",
        release: Callable[[], None] | None = None,
        release_every: int = 1 << 14,
    ):
        if ids.ndim != 1:
            raise UsageError(f"ids must be a 1-D tensor of token ids, got {tuple(ids.shape)}")
        if block_size < 1:
            raise UsageError(f"{size_name} must be >= 1, got {block_size}")
        if num_tokens(ids) < block_size + 1:
            raise DataError(
                f"{name}: {num_tokens(ids)} tokens are too few for one block of "
                f"{block_size} + 1 tokens; use more text or a smaller {size_name}"
            )
        self.ids = ids.long() if isinstance(ids, Tensor) else ids
        self.block_size = block_size
        self._release, self._release_every, self._drawn = release, release_every, 0

    @property
    def num_offsets(self) -> int:
        """How many distinct blocks there are (offsets ``0 .. N - T - 1``)."""
        return num_tokens(self.ids) - self.block_size

    def blocks_at(self, offsets: Tensor) -> tuple[Tensor, Tensor]:
        """Inputs and targets ``(B, T)`` of the blocks starting at ``offsets`` ``(B,)``."""
        if isinstance(self.ids, Tensor):
            chunk = self.ids[offsets[:, None] + torch.arange(self.block_size + 1)]
        else:
            index = offsets.numpy()[:, None] + np.arange(self.block_size + 1)
            chunk = torch.from_numpy(self.ids[index].astype(np.int64))
            self._drawn += len(offsets)
            if self._release is not None and self._drawn >= self._release_every:
                self._drawn = 0
                self._release()
        return chunk[:, :-1], chunk[:, 1:]

    def sample(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        """``batch_size`` blocks at uniformly random offsets (a CPU ``generator``)."""
        offsets = torch.randint(self.num_offsets, (batch_size,), generator=generator)
        return self.blocks_at(offsets)

    def batches(
        self, batch_size: int, *, seed: int = 0, generator: torch.Generator | None = None
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """An endless, reproducible stream of random batches.

        Pass your own CPU ``generator`` (``seed`` is then unused) to save and
        restore the stream's position with ``generator.get_state()``.
        """
        generator = generator or torch.Generator().manual_seed(seed)
        while True:
            yield self.sample(batch_size, generator)

    def sequential(
        self, batch_size: int, *, max_blocks: int | None = None
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """Non-overlapping blocks from the start, in order (for evaluation).

        Every token but the last ``< T + 1`` is predicted once; ``max_blocks``
        caps the number of blocks.
        """
        offsets = torch.arange(0, self.num_offsets, self.block_size)
        if max_blocks is not None:
            offsets = offsets[:max_blocks]
        for start in range(0, offsets.numel(), batch_size):
            yield self.blocks_at(offsets[start : start + batch_size])
