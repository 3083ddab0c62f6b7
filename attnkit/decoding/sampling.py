"""Ancestral sampling with temperature, top-k and nucleus (top-p) filtering.

Filters apply in this order: temperature, top-k, top-p (Holtzman et al., 2020:
keep the smallest set of most probable tokens whose mass reaches ``top_p``).
Reported scores are the *model's* log-probabilities of the sampled tokens
(before temperature and filtering), so they compare with greedy and beam scores.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnkit.decoding.common import (
    DecodeResult,
    SearchSettings,
    check_float,
    check_int,
    decode_loop,
)
from attnkit.decoding.protocol import AnyStepper


def filter_logits(
    logits: Tensor, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> Tensor:
    """Scaled logits ``(B, V)`` with filtered-out tokens set to ``-inf``.

    Every accepted value gives a proper distribution: the logits are shifted so
    each row's largest is 0 and divided by ``temperature`` in float64, so a
    temperature of 1e-300 gives 0 for the best token and -inf for the others
    (greedy), never inf - inf = NaN; and the most probable token always stays,
    whatever ``top_p`` (1e-300 rounds to 0 in float32, where ``mass >= 0``
    would otherwise drop every token).
    """
    dtype = torch.promote_types(logits.dtype, torch.float32)
    logits = logits.to(dtype)
    top = logits.amax(dim=-1, keepdim=True)
    shifted = logits - torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    logits = (shifted.double() / temperature).to(dtype)
    if 0 < top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # Mass strictly before each token; the first token is always kept.
        before = probs.cumsum(dim=-1) - probs
        drop_sorted = before >= top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, -math.inf)
    return logits


@torch.no_grad()
def sample(
    model: AnyStepper,
    src_ids: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    max_len: int | None = None,
    check_every: int | None = None,
    search: SearchSettings | None = None,
) -> DecodeResult:
    """Sample one output per sentence of ``src_ids`` ``(B, S)``, all at once.

    Args:
        temperature: divides the logits; must be > 0 (use ``greedy_search``
            for argmax decoding).
        top_k: keep only the ``top_k`` most probable tokens (0: no limit).
        top_p: keep the smallest most-probable set with mass >= ``top_p``,
            in ``(0, 1]`` (1: no limit).
        generator: seeded ``torch.Generator`` on the model's device, for
            reproducible draws (``None``: torch's global generator).
        max_len_a, max_len_b, max_len, check_every, search: as in ``greedy_search``.
    """
    check_float("temperature", temperature, 0.0, math.inf, open_low=True)
    check_int("top_k", top_k, 0)
    check_float("top_p", top_p, 0.0, 1.0, open_low=True)

    def pick(logits: Tensor, logp: Tensor) -> Tensor:
        scaled = filter_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
        probs = scaled.softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    return decode_loop(
        model,
        src_ids,
        pick,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        max_len=max_len,
        check_every=check_every,
        search=search,
    )
