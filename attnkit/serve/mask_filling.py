"""Fill-mask requests: a text with mask markers as ids, and the pass that fills them.

``encode_masked`` runs in the event loop (a text too long for the model is a
422 before it waits for the model); ``fill_masks`` is the model work, one pass
over every job of a batch (``attnkit.serve.encoder_batch``) or over the one
text of ``attnkit explore``. ``ModelHost.encode_masked`` and ``ModelHost.fill_masks``
call these with the engine's model and tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import torch
from torch import nn

from attnkit.data.tokenizers import Tokenizer
from attnkit.serve.cancellable import live_requests
from attnkit.serve.handles import RequestHandle
from attnkit.serve.model_host_types import Candidate, RequestError

__all__ = [
    "Candidate", "Filled", "MaskCandidates", "MaskJob", "MaskedText", "encode_masked", "fill_masks",
]  # fmt: skip


@dataclass(frozen=True)
class MaskedText:
    ids: list[int]
    positions: list[int]


@dataclass(frozen=True)
class MaskJob:
    """One fill-mask request: its text's ids and mask positions, candidates per mask."""

    masked: MaskedText
    top_k: int


class MaskCandidates(TypedDict):
    position: int  # the mask's token index in the input
    candidates: list[Candidate]


Filled = tuple[str, list[MaskCandidates]]  # the filled text and each mask's candidates


def encode_masked(
    tokenizer: Tokenizer, mask_id: int, max_len: int, text: str, marker: str, field: str = "text"
) -> MaskedText:
    """The ids of ``text`` with each ``marker`` as ``mask_id``; a 422 naming ``field`` if
    it holds more than ``max_len`` tokens or none."""
    ids: list[int] = []
    pieces = text.split(marker)
    for i, piece in enumerate(pieces):
        ids += tokenizer.encode(piece) if piece else []
        if i < len(pieces) - 1:
            ids.append(mask_id)
    if len(ids) > max_len:
        raise RequestError(f"{field}: {len(ids)} tokens; the model reads at most {max_len}")
    if not ids:
        raise RequestError(f"{field}: holds no token the tokenizer knows")
    return MaskedText(ids, [p for p, t in enumerate(ids) if t == mask_id])


@torch.no_grad()
def fill_masks(
    model: nn.Module,
    tokenizer: Tokenizer,
    jobs: Sequence[MaskJob],
    handles: Sequence[RequestHandle] | None = None,
    *,
    device: torch.device,
) -> list[Filled | None]:
    """Every job's text with each mask filled by its best token, and each mask's
    candidates, in one pass over the right-padded texts (the padding is masked out of
    attention, so each row gets what it gets alone). The jobs whose ``handles`` are
    cancelled are left out (``None``); if all are, this raises."""
    live = live_requests(handles, len(jobs))
    results: list[Filled | None] = [None] * len(jobs)
    if not live:
        return results
    tok, vocab = tokenizer, tokenizer.vocab_size
    from attnkit.data.classification import collate_examples  # right-pads

    rows = [jobs[i].masked.ids for i in live]
    ids = collate_examples(rows, None, None, tok.pad_id).ids.to(device)
    where = torch.zeros_like(ids, dtype=torch.bool)
    for b, i in enumerate(live):
        where[b, jobs[i].masked.positions] = True
    # The mask positions' scores only: (N, V), row by row, positions in order.
    logits = model(ids, classify=False, mlm_positions=where).mlm_logits.float()
    logits[:, vocab:] = float("-inf")  # the mask id is no answer
    probs = logits.softmax(-1)
    n = 0
    for i in live:
        masked, top_k = jobs[i].masked, jobs[i].top_k
        filled = list(masked.ids)
        masks: list[MaskCandidates] = []
        for pos in masked.positions:
            top = probs[n].topk(min(top_k, vocab))
            n += 1
            filled[pos] = int(top.indices[0])
            masks.append({
                "position": pos,
                "candidates": [{"text": tok.decode([int(t)]), "score": float(p)}
                               for p, t in zip(top.values, top.indices)],
            })  # fmt: skip
        results[i] = (tok.decode(filled), masks)
    return results
