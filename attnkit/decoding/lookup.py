"""Prompt-lookup decoding: speculative greedy decoding without a second model.

Text that copies from its prompt (a summary quoting an e-mail, code edits,
a repeated paragraph) can be drafted by looking up the sequence's last
n-gram earlier in the prompt and output, as transformers'
``prompt_lookup_num_tokens`` does (Saxena, 2023). Each round:

1. find the last ``n`` tokens (``n = max_ngram .. 1``) at an earlier place in
   the sequence (the most recent one) and propose the (up to) ``num_tokens``
   tokens that followed it;
2. feed the newest token and the draft in ONE forward pass (``Verifier.verify``),
   which gives the model's logits after each of them;
3. accept the draft's longest prefix that equals the model's own argmax,
   then the model's next token after it (so a round yields at least one
   token), and roll the cache back to the accepted length
   (``RewindableState.truncate``).

The output is the greedy output (``stream(..., temperature=0)``), token for
token, up to floating-point differences between scoring several positions in
one pass and one at a time (tested on random models: identical). Rounds
with no draft step the stepper as plain greedy does. Past the model's
context the window slides as in ``stream``, which takes over from there.

Batch 1 only (one prompt); sampling is not done here (greedy only).

Shapes: ``T`` prompt length, ``V`` vocabulary, ``k`` draft length.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnkit.decoding.common import check_int
from attnkit.decoding.generate import stream
from attnkit.decoding.protocol import AnyStepper, CausalStepper, RewindableState, Verifier
from attnkit.errors import UsageError

DEFAULT_NGRAM = 3


@dataclass
class LookupStats:
    """What a prompt-lookup decode did (filled in as it runs).

    Attributes:
        forwards: model passes after the prompt's (each yields >= 1 token).
        tokens: tokens yielded.
        drafted: draft tokens proposed; ``accepted``: of those, accepted.
    """

    forwards: int = 0
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.forwards if self.forwards else 0.0


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


def _plain(
    model: CausalStepper[Any],
    ids: Tensor,
    max_new_tokens: int,
    eos_id: int | None,
    stepper: AnyStepper | None,
    stats: LookupStats,
) -> Iterator[Tensor]:
    """Plain greedy ``stream`` from ``ids`` on, counted (one model pass per token)."""
    for token in stream(model, ids, max_new_tokens, temperature=0.0, eos_id=eos_id,
                        stepper=stepper):  # fmt: skip
        stats.forwards += 1
        stats.tokens += 1
        yield token


@torch.no_grad()
def lookup_stream(
    model: CausalStepper[Any],
    prompt_ids: Tensor,
    max_new_tokens: int,
    *,
    num_tokens: int = 10,
    max_ngram: int = DEFAULT_NGRAM,
    eos_id: int | None = None,
    stepper: AnyStepper | None = None,
    stats: LookupStats | None = None,
) -> Iterator[Tensor]:
    """Greedy continuation of ``prompt_ids`` ``(1, T)``, yielded as ``(1,)`` tokens.

    Args:
        model: a ``CausalStepper`` that is a ``Verifier`` (``DecoderOnlyLM``), eval mode.
        max_new_tokens: tokens to yield at most; ``eos_id``: stop after it.
        num_tokens: the draft's length ``k`` (>= 1).
        max_ngram: the longest suffix looked up (>= 1).
        stepper: what steps ``model`` on the rounds without a draft (as in ``stream``).
        stats: filled in with forwards, drafts and acceptances.
    """
    check_int("num_tokens", num_tokens, 1)
    check_int("max_ngram", max_ngram, 1)
    if prompt_ids.dim() != 2 or prompt_ids.size(0) != 1 or prompt_ids.size(1) < 1:
        raise UsageError(f"prompt lookup: one prompt (1, T), got {tuple(prompt_ids.shape)}")
    if not isinstance(model, Verifier):
        raise UsageError(f"prompt lookup: {type(model).__name__} cannot verify a draft")
    check_int("max_new_tokens", max_new_tokens, 0)
    if max_new_tokens == 0:
        return
    stats = LookupStats() if stats is None else stats
    steps: AnyStepper = model if stepper is None else stepper
    context = model.context_length
    if prompt_ids.size(1) > context:  # the window slides from the start: nothing to keep
        yield from _plain(model, prompt_ids, max_new_tokens, eos_id, stepper, stats)
        return
    device = prompt_ids.device
    ids: list[int] = prompt_ids[0].tolist()
    index = NgramIndex(ids, max_ngram)
    state = steps.start(prompt_ids, max_steps=min(max_new_tokens, context - len(ids) + 1))
    if not isinstance(state, RewindableState) or not state.rewindable:
        yield from _plain(model, prompt_ids, max_new_tokens, eos_id, stepper, stats)
        return
    logits, state = steps.step(prompt_ids[:, -1], state)  # (1, V): the prompt's last token
    stats.forwards += 1
    emitted = 0
    while True:
        # The cache holds len(ids) positions; ``logits`` predict the next token.
        token = int(logits[0].argmax())
        ids.append(token)
        emitted += 1
        stats.tokens += 1
        yield torch.tensor([token], device=device)
        left = max_new_tokens - emitted
        if left == 0 or token == eos_id:
            return
        if len(ids) > context:  # the window slides: re-encoded from scratch, as stream does
            window = torch.tensor([ids], device=device)
            yield from _plain(model, window, left, eos_id, stepper, stats)
            return
        # Fed: the token and the draft, at positions len(ids) - 1 ...; the draft stays
        # inside the context and leaves the last token to come out of a forward pass.
        draft = index.draft(min(num_tokens, left - 1, context - len(ids)))
        if not draft:
            logits, state = steps.step(torch.tensor([token], device=device), state)
            stats.forwards += 1
            continue
        fed = torch.tensor([[token, *draft]], device=device)
        every, state = model.verify(fed, state)  # (1, 1 + d, V)
        stats.forwards += 1
        stats.drafted += len(draft)
        choices = every[0].argmax(dim=-1).tolist()  # the model's token after each fed one
        accepted = 0
        while accepted < len(draft) and choices[accepted] == draft[accepted]:
            accepted += 1
        stats.accepted += accepted
        for t in draft[:accepted]:
            ids.append(t)
            emitted += 1
            stats.tokens += 1
            yield torch.tensor([t], device=device)
            if t == eos_id:
                return
        # Keep the fed token and the accepted draft: len(ids) positions, as at the top.
        state = state.truncate(len(ids)) if accepted < len(draft) else state
        logits = every[:, accepted]
