"""Beam search, batched over sentences and beams (fairseq's ``SequenceGenerator`` scheme).

All ``B`` sentences x ``K`` beams run as one ``(B*K)`` batch; after each step
the state follows the surviving beams through ``state.reorder(flat_indices)``.

Each step, per sentence:

1. score every continuation of every live beam (cumulative log-prob) and take
   the best ``2K`` candidates: at most ``K`` of them end in EOS (one per beam),
   so at least ``K`` others remain to be the next live beams;
2. EOS candidates among the best ``K`` are finished and move to the sentence's
   pool of finished hypotheses (EOS ranked lower is ignored, as in fairseq);
3. the best ``K`` non-EOS candidates become the live beams; at the sentence's
   length limit they are finished as they are (no EOS).

Stopping rule (fairseq's): a sentence is done once its pool holds ``K``
finished hypotheses, or at its length limit. The pool keeps the ``K`` best by
``score / lp(|Y|)`` (``length_penalty``); ``nbest`` of them are returned, best
first. Because EOS only counts among the best ``K``, ``beam_size=1`` is exactly
greedy search, whatever ``alpha``.

Shapes: ``B`` sentences, ``K`` beams, ``V`` vocabulary, ``T`` longest limit.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnkit.decoding.common import (
    DecodeResult,
    Hypothesis,
    check_float,
    check_int,
    length_penalty,
    log_probs,
    output_limits,
    resolve_check_every,
)
from attnkit.decoding.protocol import AnyStepper
from attnkit.errors import UsageError


def _take(x: Tensor, index: Tensor) -> Tensor:
    """``x[b, index[b, j]]`` for ``x`` ``(B, N, ...)`` and ``index`` ``(B, M)``."""
    if x.dim() == 2:
        return x.gather(1, index)
    return x.gather(1, index[:, :, None].expand(-1, -1, x.size(2)))


@torch.no_grad()
def beam_search(
    model: AnyStepper,
    src_ids: Tensor,
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    nbest: int = 1,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    max_len: int | None = None,
    check_every: int | None = None,
) -> DecodeResult:
    """Beam-search every sentence of ``src_ids`` ``(B, S)`` at once.

    Args:
        beam_size: live beams ``K`` per sentence (>= 1; 1 is greedy search).
        alpha: length-penalty exponent (>= 0; 0 ranks by raw summed log-prob;
            the paper uses 0.6 with beam size 4, §6.1).
        nbest: hypotheses returned per sentence, ``1 <= nbest <= beam_size``.
        max_len_a, max_len_b, max_len, check_every: as in ``greedy_search``.

    Returns:
        ``DecodeResult``: ``nbest`` lists best first; ``scores`` are raw sums of
        log-probs (the ranking divides them by ``length_penalty(|Y|, alpha)``).
    """
    check_int("beam_size", beam_size, 1)
    check_int("nbest", nbest, 1)
    if nbest > beam_size:
        raise UsageError(f"nbest must be <= beam_size ({beam_size}), got {nbest}")
    check_float("alpha", alpha, 0.0, math.inf, open_low=False)
    limits, bound = output_limits(
        src_ids, model.pad_id, max_len_a=max_len_a, max_len_b=max_len_b, max_len=max_len
    )
    B, K, device, eos = src_ids.size(0), beam_size, src_ids.device, model.eos_id
    check_every = resolve_check_every(check_every, device)
    limits = limits.to(device)
    neg_inf = -math.inf

    state = model.start(src_ids, max_steps=bound)  # encode once, then copy each row K times
    state = state.reorder(torch.arange(B, device=device).repeat_interleave(K))
    base = torch.arange(B, device=device)[:, None] * K  # (B, 1) first flat row per sentence
    tokens = torch.full((B * K,), model.bos_id, dtype=torch.long, device=device)
    history = torch.full((B, K, bound), model.pad_id, dtype=torch.long, device=device)
    live: Tensor | None = None  # (B, K) cumulative log-probs, -inf = no beam
    # The pool of finished hypotheses, K per sentence, best first.
    pool_tokens = history.clone()
    pool_len = torch.zeros(B, K, dtype=torch.long, device=device)  # output tokens, no EOS
    pool_raw: Tensor | None = None
    pool_rank: Tensor | None = None  # raw / lp, -inf = empty slot
    done = torch.zeros(B, dtype=torch.bool, device=device)
    positions = torch.arange(2 * K, device=device)

    for t in range(bound):
        logits, state = model.step(tokens, state)
        logp = log_probs(logits).view(B, K, -1)
        V = logp.size(2)
        if live is None:  # only beam 0 starts, so the first step has no duplicates
            live = logp.new_full((B, K), neg_inf)
            live[:, 0] = 0.0
            pool_raw = logp.new_full((B, K), neg_inf)
            pool_rank = pool_raw.clone()
        assert pool_raw is not None and pool_rank is not None
        live = live.masked_fill(done[:, None], neg_inf)  # done sentences go quiet
        cand = (live[:, :, None] + logp).view(B, K * V)
        cand_scores, cand_idx = cand.topk(min(2 * K, K * V), dim=1)  # (B, 2K) best first
        cand_beam, cand_tok = cand_idx // V, cand_idx % V
        finite = cand_scores > neg_inf
        is_eos = cand_tok == eos

        # Next live beams: the first K non-EOS candidates, in rank order.
        pick = torch.argsort(is_eos.long(), dim=1, stable=True)[:, :K]
        new_live, new_beam, new_tok = (_take(x, pick) for x in (cand_scores, cand_beam, cand_tok))
        new_history = _take(history, new_beam)
        new_history[:, :, t] = new_tok

        # Finish EOS among the best K, and every live beam at the length limit.
        eos_ok = is_eos & finite & (positions[: cand_scores.size(1)] < K)[None, :]
        at_limit = (limits <= t + 1)[:, None] & (new_live > neg_inf)
        add_raw = torch.cat(
            [cand_scores.masked_fill(~eos_ok, neg_inf), new_live.masked_fill(~at_limit, neg_inf)],
            dim=1,
        )
        add_tokens = torch.cat([_take(history, cand_beam), new_history], dim=1)
        add_len = torch.cat(
            [torch.full_like(cand_beam, t), torch.full_like(new_beam, t + 1)], dim=1
        )
        # Everything finished at this step has t + 1 scored tokens.
        all_rank = torch.cat([pool_rank, add_raw / length_penalty(t + 1, alpha)], dim=1)
        keep = torch.sort(all_rank, dim=1, descending=True, stable=True).indices[:, :K]
        pool_rank = _take(all_rank, keep)
        pool_raw = _take(torch.cat([pool_raw, add_raw], dim=1), keep)
        pool_len = _take(torch.cat([pool_len, add_len], dim=1), keep)
        pool_tokens = _take(torch.cat([pool_tokens, add_tokens], dim=1), keep)

        full = (pool_rank > neg_inf).all(dim=1)
        done = done | full | (limits <= t + 1)
        live, history = new_live, new_history
        # Beams never leave their sentence: a state may skip moving source-side parts.
        state = state.reorder((base + new_beam).view(-1), group_size=K)
        tokens = new_tok.view(-1)
        if check_every and (t + 1) % check_every == 0 and bool(done.all()):
            break

    assert pool_raw is not None and pool_rank is not None
    filled = (pool_rank[:, :nbest] > neg_inf).tolist()
    rows, lens = pool_tokens[:, :nbest].tolist(), pool_len[:, :nbest].tolist()
    raws = pool_raw[:, :nbest].tolist()
    return DecodeResult.from_nbest(
        [
            [Hypothesis(toks[:n], s) for toks, n, s, ok in zip(r, ln, rw, f) if ok]
            for r, ln, rw, f in zip(rows, lens, raws, filled)
        ]
    )
