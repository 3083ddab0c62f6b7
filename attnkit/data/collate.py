"""Collation: lists of token ids -> right-padded LongTensors for teacher forcing.

Shapes: ``B`` sentences, ``S`` source length (tokens + EOS), ``T`` target
length (tokens + 1: BOS in front for the input, EOS behind for the labels).
The special ids are the tokenizer's (``tokenizer.pad_id`` ...): no defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.errors import UsageError


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int) -> Tensor:
    """(B, T) LongTensor, each row a sequence right-padded with ``pad_id``; T = longest."""
    if not seqs:
        raise UsageError("pad_batch: got no sequences")
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    for row, seq in enumerate(seqs):
        out[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    return out


@dataclass
class TranslationBatch:
    """Teacher-forcing tensors, right-padded.

    ``src`` (B, S): tokens + EOS; ``tgt_in`` (B, T): BOS + tokens; ``tgt_out`` (B, T): tokens + EOS.
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    pad_id: int

    @property
    def num_tgt_tokens(self) -> int:
        """Target tokens the loss is taken over (EOS included, padding not)."""
        return int((self.tgt_out != self.pad_id).sum())

    def to(self, device: torch.device | str, non_blocking: bool = False) -> TranslationBatch:
        src, tgt_in, tgt_out = (
            t.to(device, non_blocking=non_blocking) for t in (self.src, self.tgt_in, self.tgt_out)
        )
        return TranslationBatch(src, tgt_in, tgt_out, self.pad_id)


def collate_translation(
    examples: Sequence[tuple[Sequence[int], Sequence[int]]],
    pad_id: int,
    bos_id: int,
    eos_id: int,
) -> TranslationBatch:
    """Batch ``(src_ids, tgt_ids)`` pairs (no specials yet) for teacher forcing.

    The decoder reads ``tgt_in`` and is trained to predict ``tgt_out``, the same
    sequence shifted left by one (section 3.1: outputs are offset by one position).
    """
    src = [[*s, eos_id] for s, _ in examples]
    tgt_in = [[bos_id, *t] for _, t in examples]
    tgt_out = [[*t, eos_id] for _, t in examples]
    return TranslationBatch(
        pad_batch(src, pad_id), pad_batch(tgt_in, pad_id), pad_batch(tgt_out, pad_id), pad_id
    )
