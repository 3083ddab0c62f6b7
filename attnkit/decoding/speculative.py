"""Speculative decoding: a drafter proposes, the model checks a whole draft in one pass.

One verification loop serves every ``Drafter`` (``attnkit.decoding.protocol``):
prompt lookup (``attnkit.decoding.lookup``) and a small draft model
(``attnkit.decoding.draft``). Each round:

1. the drafter proposes up to ``k`` tokens after the sequence so far;
2. the newest token and the draft are fed in ONE forward pass
   (``Verifier.verify``), which gives the model's logits after each of them;
3. a prefix of the draft is accepted, and one more token comes from the model
   (so a round yields at least one token); the cache is rolled back to the
   accepted length (``RewindableState.truncate``) and the drafter told
   (``Drafter.accepted``).

Acceptance (step 3):

* greedy (``temperature == 0``): the draft's longest prefix equal to the
  model's argmax, then the model's argmax after it. The output is plain
  greedy's (``stream(..., temperature=0)``) token for token, up to
  floating-point differences between scoring several positions in one pass
  and one at a time (tested on random models: identical);
* sampling: the standard rule (Leviathan et al., 2023, §2.3; Chen et al., 2023,
  Algorithm 2). With ``p`` the model's distribution after the same
  temperature/top-k/top-p filtering that plain sampling draws from
  (``filter_logits``) and ``q`` the drafter's, draft token ``x`` is accepted
  with probability ``min(1, p(x) / q(x))``; the first rejected one is replaced
  by a draw from ``norm(max(0, p - q))``; a fully accepted draft gets one more
  token drawn from ``p``. Every token is then distributed exactly as plain
  sampling's (tested). A deterministic drafter (a lookup, a greedy draft
  model) has a one-hot ``q``: ``x`` is accepted with probability ``p(x)``,
  and a rejection draws from ``p`` with ``x`` removed.

Rounds with no draft step the model as ``stream`` does. Past the model's
context the window slides as in ``stream``, which takes over from there.
Batch 1 only (one prompt).

Shapes: ``T`` prompt length, ``V`` vocabulary, ``d`` draft length.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnkit.decoding.common import check_float, check_int
from attnkit.decoding.generate import pick_token, stream
from attnkit.decoding.protocol import (
    AnyStepper,
    CausalStepper,
    Draft,
    Drafter,
    RewindableState,
    Verifier,
)
from attnkit.decoding.sampling import filter_logits
from attnkit.errors import UsageError


@dataclass
class SpeculativeStats:
    """What a speculative decode did (filled in as it runs).

    Attributes:
        forwards: the model's passes after the prompt's (each yields >= 1 token).
        tokens: tokens yielded.
        rounds: of the passes, those that verified a draft.
        drafted: draft tokens proposed; ``accepted``: of those, accepted.
    """

    forwards: int = 0
    tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.forwards if self.forwards else 0.0

    @property
    def accepted_per_round(self) -> float:
        """Draft tokens accepted per verifying pass (each pass adds one of its own)."""
        return self.accepted / self.rounds if self.rounds else 0.0


@dataclass(frozen=True)
class Sampling:
    """How tokens are chosen: ``temperature == 0`` is greedy; else filtered sampling."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        check_float("temperature", self.temperature, 0.0, math.inf, open_low=False)
        check_int("top_k", self.top_k, 0)
        check_float("top_p", self.top_p, 0.0, 1.0, open_low=True)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def probs(self, logits: Tensor) -> Tensor:
        """The distributions plain sampling draws from, ``(n, V)`` for logits ``(n, V)``."""
        kept = filter_logits(
            logits, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p
        )
        return kept.softmax(dim=-1)

    def pick(self, logits: Tensor) -> int:
        """One token from logits ``(1, V)``, as ``stream`` picks it."""
        return int(pick_token(logits, temperature=self.temperature, top_k=self.top_k,
                              top_p=self.top_p, generator=self.generator)[0])  # fmt: skip

    def draw(self, probs: Tensor) -> int:
        """One token from the distribution ``probs`` ``(V,)``."""
        return int(torch.multinomial(probs, 1, generator=self.generator)[0])


def accept(every: Tensor, draft: Draft, how: Sampling) -> tuple[int, int]:
    """How many of ``draft``'s ``d`` tokens to keep, and the model's token after them.

    ``every`` ``(d + 1, V)``: the model's logits after the fed token and after each
    draft token. Greedy: the longest prefix equal to the argmax, then the argmax.
    Sampling: the acceptance rule of the module docstring.
    """
    d = len(draft.tokens)
    if how.greedy:
        choices = every.argmax(dim=-1).tolist()
        n = 0
        while n < d and choices[n] == draft.tokens[n]:
            n += 1
        return n, int(choices[n])
    p = how.probs(every)  # (d + 1, V)
    rows = torch.arange(d, device=p.device)
    x = torch.tensor(draft.tokens, device=p.device)
    px = p[rows, x].double()
    qx = torch.ones_like(px) if draft.probs is None else draft.probs[rows, x].double()
    u = torch.rand(d, generator=how.generator, device=p.device, dtype=torch.float64)
    kept = (u < px / qx).tolist()  # u < 1 always: the same as u < min(1, p/q)
    n = kept.index(False) if False in kept else d
    if n == d:
        return d, how.draw(p[d])
    if draft.probs is None:  # q one-hot at x: max(0, p - q) is p without x
        residual = p[n].clone()
        residual[draft.tokens[n]] = 0.0
    else:
        residual = (p[n] - draft.probs[n].to(p.dtype)).clamp_min(0.0)
    if not float(residual.sum()) > 0.0:  # p == q up to rounding: a rejection was a rounding
        residual = p[n]
    return n, how.draw(residual)


def _plain(
    model: CausalStepper[Any],
    ids: Tensor,
    max_new_tokens: int,
    how: Sampling,
    eos_id: int | None,
    stepper: AnyStepper | None,
    stats: SpeculativeStats,
) -> Iterator[Tensor]:
    """Plain ``stream`` from ``ids`` on, counted (one model pass per token)."""
    for token in stream(model, ids, max_new_tokens, temperature=how.temperature,
                        top_k=how.top_k, top_p=how.top_p, generator=how.generator,
                        eos_id=eos_id, stepper=stepper):  # fmt: skip
        stats.forwards += 1
        stats.tokens += 1
        yield token


@torch.no_grad()
def speculative_stream(
    model: CausalStepper[Any],
    prompt_ids: Tensor,
    max_new_tokens: int,
    drafter: Drafter,
    *,
    num_tokens: int,
    sampling: Sampling | None = None,
    eos_id: int | None = None,
    stepper: AnyStepper | None = None,
    stats: SpeculativeStats | None = None,
) -> Iterator[Tensor]:
    """The continuation of ``prompt_ids`` ``(1, T)``, yielded as ``(1,)`` tokens.

    Args:
        model: a ``CausalStepper`` that is a ``Verifier`` (``DecoderOnlyLM``), eval mode.
        drafter: proposes the drafts (``propose``/``accepted``).
        num_tokens: the longest draft ``k`` (>= 1).
        sampling: greedy (the default) or sampling's settings and generator.
        max_new_tokens: tokens to yield at most; ``eos_id``: stop after it.
        stepper: what steps ``model`` on the rounds without a draft (as in ``stream``).
        stats: filled in with passes, drafts and acceptances.
    """
    how = Sampling() if sampling is None else sampling
    check_int("num_tokens", num_tokens, 1)
    if prompt_ids.dim() != 2 or prompt_ids.size(0) != 1 or prompt_ids.size(1) < 1:
        raise UsageError(f"speculative decoding: one prompt (1, T), got {tuple(prompt_ids.shape)}")
    if not isinstance(model, Verifier):
        raise UsageError(f"speculative decoding: {type(model).__name__} cannot verify a draft")
    check_int("max_new_tokens", max_new_tokens, 0)
    if max_new_tokens == 0:
        return
    stats = SpeculativeStats() if stats is None else stats
    steps: AnyStepper = model if stepper is None else stepper
    context = model.context_length
    if prompt_ids.size(1) > context:  # the window slides from the start: nothing to keep
        yield from _plain(model, prompt_ids, max_new_tokens, how, eos_id, stepper, stats)
        return
    device = prompt_ids.device
    ids: list[int] = prompt_ids[0].tolist()
    state = steps.start(prompt_ids, max_steps=min(max_new_tokens, context - len(ids) + 1))
    if not isinstance(state, RewindableState) or not state.rewindable:
        yield from _plain(model, prompt_ids, max_new_tokens, how, eos_id, stepper, stats)
        return
    logits, state = steps.step(prompt_ids[:, -1], state)  # (1, V): the prompt's last token
    stats.forwards += 1
    token = how.pick(logits)
    emitted = 0
    while True:
        # The cache holds len(ids) positions; ``token`` is the model's next one.
        ids.append(token)
        emitted += 1
        stats.tokens += 1
        yield torch.tensor([token], device=device)
        left = max_new_tokens - emitted
        if left == 0 or token == eos_id:
            return
        if len(ids) > context:  # the window slides: re-encoded from scratch, as stream does
            window = torch.tensor([ids], device=device)
            yield from _plain(model, window, left, how, eos_id, stepper, stats)
            return
        # Fed: the token and the draft, at positions len(ids) - 1 ...; the draft stays
        # inside the context and leaves the last token to come out of a forward pass.
        k = min(num_tokens, left - 1, context - len(ids))
        draft = drafter.propose(ids, k) if k > 0 else Draft([])
        if not draft.tokens:
            logits, state = steps.step(torch.tensor([token], device=device), state)
            stats.forwards += 1
            token = how.pick(logits)
            continue
        fed = torch.tensor([[token, *draft.tokens]], device=device)
        every, state = model.verify(fed, state)  # (1, 1 + d, V)
        stats.forwards += 1
        stats.rounds += 1
        stats.drafted += len(draft.tokens)
        accepted, token = accept(every[0], draft, how)
        stats.accepted += accepted
        drafter.accepted(accepted)
        for t in draft.tokens[:accepted]:
            ids.append(t)
            emitted += 1
            stats.tokens += 1
            yield torch.tensor([t], device=device)
            if t == eos_id:
                return
        # Keep the fed token and the accepted draft: len(ids) positions, as at the top.
        state = state.truncate(len(ids)) if accepted < len(draft.tokens) else state
