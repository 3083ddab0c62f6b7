"""Beam search, batched over sentences and beams (fairseq's ``SequenceGenerator`` scheme).

All live sentences x ``K`` beams run as one batch of rows; after each step the
state follows the surviving beams through ``state.reorder(flat_indices)``.

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

On the CPU (``SearchSettings.sync_free``) the K new beams of a sentence are
put in rows so that each parent's first child stays in its parent's row: the
cache then copies only the other rows (about a third on a trained Multi30k
model), not all of them. The order
of the live beams changes nothing but which of two equal scores wins a tie.

Two tricks of CTranslate2's keep the batch small (the results are the same):

* the first step runs on the ``B`` unexpanded rows (only beam 0 is live
  then); the state is copied to ``K`` beams per sentence after it;
* done sentences leave the batch (their rows are dropped from the state) when
  enough of them have piled up (``COMPACT_FRACTION``), at the ``check_every``
  steps where the search looks at the host anyway.

Shapes: ``B`` sentences, ``n`` of them still decoded, ``K`` beams, ``V``
vocabulary, ``T`` longest limit, ``N`` = ``nbest``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.decoding.common import (
    DecodeResult,
    Hypothesis,
    SearchSettings,
    check_float,
    check_int,
    length_penalty,
    log_probs,
    output_limits,
    resolve_check_every,
)
from attnkit.decoding.protocol import AnyStepper, FixedBatch
from attnkit.errors import UsageError

COMPACT_FRACTION = 0.25
"""Drop done sentences from the batch once they are at least this share of the
sentences still in it. A drop costs a gather of the bookkeeping and of the source
side (cross-attention keys/values, memory mask), a host sync in the state, and
fresh spare buffers in the caches (their batch size changed); the beams' own
keys/values move in the step's reorder anyway. Waiting until a quarter of the
rows is idle bounds the wasted work per step at a quarter, with at most
``log(B) / log(4/3)`` drops per search (14 for 64 sentences)."""


def _take(x: Tensor, index: Tensor) -> Tensor:
    """``x[b, index[b, j]]`` for ``x`` ``(B, N, ...)`` and ``index`` ``(B, M)``."""
    if x.dim() == 2:
        return x.gather(1, index)
    return x.gather(1, index[:, :, None].expand(-1, -1, x.size(2)))


def _in_parent_rows(parent: Tensor) -> Tensor:
    """Which candidate goes to each beam row so that rows stay put where they can.

    ``parent`` ``(n, K)``: the beam row each of the K new beams continues (best
    first). The first child of each parent takes its parent's row; the other
    children fill the rows whose beams had none, in order. Returns ``(n, K)``:
    the candidate for row ``j``. Rows that keep their beam need no cache copy
    (``KVCache.reorder`` moves only the others); the search itself does not
    depend on the order of its live beams.
    """
    n, K = parent.shape
    slots = torch.arange(K, device=parent.device)
    same = parent[:, :, None] == parent[:, None, :]  # (n, K, K): [c, c'] share a parent
    first = ~(same & (slots[:, None] > slots[None, :])).any(dim=2)  # no earlier sibling
    claimed = torch.zeros_like(parent).scatter_add_(1, parent, first.long()) > 0
    free = torch.argsort(claimed.long(), dim=1, stable=True)  # unclaimed rows first, in order
    later = (~first).long().cumsum(dim=1) - 1  # rank among the non-first children
    row = torch.where(first, parent, free.gather(1, later.clamp(min=0)))
    return torch.empty_like(row).scatter_(1, row, slots.expand(n, K).contiguous())


@dataclass
class _Pool:
    """Finished hypotheses, best first, per sentence.

    Attributes:
        tokens: ``(n, K, T)`` output tokens (no EOS), pad after them.
        length: ``(n, K)`` long, output tokens (no EOS).
        raw: ``(n, K)`` summed log-probs.
        rank: ``(n, K)`` ``raw / lp``; ``-inf`` marks an empty slot.
    """

    tokens: Tensor
    length: Tensor
    raw: Tensor
    rank: Tensor

    @classmethod
    def empty(cls, n: int, k: int, bound: int, pad: int, like: Tensor) -> _Pool:
        """``n`` sentences x ``k`` empty slots; scores in ``like``'s dtype and device."""
        tokens = torch.full((n, k, bound), pad, dtype=torch.long, device=like.device)
        raw = like.new_full((n, k), -math.inf)
        return cls(tokens, torch.zeros_like(tokens[:, :, 0]), raw, raw.clone())

    def rows(self, index: Tensor) -> _Pool:
        """Sentences ``index`` ``(m,)``."""
        return _Pool(*(p.index_select(0, index) for p in self._parts()))

    def head(self, slots: int) -> _Pool:
        """The first ``slots`` slots of every sentence (views)."""
        return _Pool(*(p[:, :slots] for p in self._parts()))

    def put(self, index: Tensor, other: _Pool) -> None:
        """Write ``other``'s sentences to rows ``index`` ``(m,)`` (same slot count)."""
        for mine, theirs in zip(self._parts(), other._parts()):
            mine.index_copy_(0, index, theirs)

    def _parts(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return self.tokens, self.length, self.raw, self.rank

    def add(
        self, rows: Tensor | None, raw: Tensor, length: Tensor, tokens: Tensor, lp: float | Tensor
    ) -> None:
        """Merge ``A`` new hypotheses into sentences ``rows`` ``(m,)`` (``None``: all).

        ``raw`` ``(m, A)`` (``-inf``: nothing), ``length`` ``(1, A)``, ``tokens``
        ``(m, A, t)`` (``t``: the columns any hypothesis can have filled yet), ``lp``
        the length penalty they share. Keeps the ``K`` best, stably (ties: the
        older, then the earlier candidate).
        """
        k, t = self.rank.size(1), tokens.size(2)
        old = self if rows is None else self.rows(rows)
        all_rank = torch.cat([old.rank, raw / lp], dim=1)
        keep = torch.sort(all_rank, dim=1, descending=True, stable=True).indices[:, :k]
        rank = _take(all_rank, keep)
        raw = _take(torch.cat([old.raw, raw], dim=1), keep)
        length = _take(torch.cat([old.length, length.expand(keep.size(0), -1)], dim=1), keep)
        # Columns t and later are pad in every slot and candidate: they need not move.
        tok = _take(torch.cat([old.tokens[:, :, :t], tokens], dim=1), keep)
        if rows is None:
            self.rank, self.raw, self.length = rank, raw, length
            self.tokens[:, :, :t] = tok
        else:
            self.rank.index_copy_(0, rows, rank)
            self.raw.index_copy_(0, rows, raw)
            self.length.index_copy_(0, rows, length)
            self.tokens[rows, :, :t] = tok


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
    compact: bool = True,
    search: SearchSettings | None = None,
) -> DecodeResult:
    """Beam-search every sentence of ``src_ids`` ``(B, S)`` at once.

    Args:
        beam_size: live beams ``K`` per sentence (>= 1; 1 is greedy search).
        alpha: length-penalty exponent (>= 0; 0 ranks by raw summed log-prob;
            the paper uses 0.6 with beam size 4, §6.1).
        nbest: hypotheses returned per sentence, ``1 <= nbest <= beam_size``.
        max_len_a, max_len_b, max_len, check_every, search: as in ``greedy_search``.
        compact: drop done sentences from the batch (module doc). Only at
            ``check_every`` steps (``0``: never), and never for a stepper that
            declares ``FixedBatch`` (a compiled step, an int8 model).

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
    check_every = resolve_check_every(check_every, search)
    compact = compact and not (isinstance(model, FixedBatch) and model.fixed_batch)
    # Where a host sync costs nothing (the CPU), update the pool only for the sentences
    # that finish something (most steps: none). On an accelerator that would sync
    # every step, so there every sentence's pool is updated every step, as before.
    sync_free = (search or SearchSettings()).sync_free
    limits = limits.to(device)
    neg_inf = -math.inf

    # Step 0 runs on the B encoded rows: only beam 0 is live there, so K copies
    # would compute the same thing K times. ``width`` is the rows per sentence.
    state = model.start(src_ids, max_steps=bound)
    width = 1
    tokens = torch.full((B,), model.bos_id, dtype=torch.long, device=device)
    ids = torch.arange(B, device=device)  # (n,) each decoded sentence's row in src_ids
    first_row = torch.arange(B, device=device)[:, None]  # (B, 1) x width: first row per sentence
    # Two history buffers take turns (gathered from one into the other, no allocation).
    history = torch.full((B, K, bound), model.pad_id, dtype=torch.long, device=device)
    spare = history.clone()
    live: Tensor | None = None  # (n, width) cumulative log-probs, -inf = no beam
    pool: _Pool | None = None  # the n decoded sentences' finished hypotheses
    out: _Pool | None = None  # (B, N): the sentences that left the batch, by row of src_ids
    done = torch.zeros(B, dtype=torch.bool, device=device)

    for t in range(bound):
        logits, state = model.step(tokens, state)
        logp = log_probs(logits)
        n, V = logp.size(0) // width, logp.size(1)
        if live is None or pool is None:
            live = logp.new_zeros(B, 1)
            pool = _Pool.empty(B, K, bound, model.pad_id, live)
            n_cand = min(2 * K, K * V)  # what K beams of V tokens give from step 1 on
            first_k = (torch.arange(n_cand, device=device) < K)[None, :]
            # Per candidate: 2K EOS-finished ones (t output tokens), K at the limit (t + 1).
            add_len = torch.cat([torch.zeros(1, n_cand), torch.ones(1, K)], dim=1)
            add_len = add_len.long().to(device)
        live = live.masked_fill(done[:, None], neg_inf)  # done sentences go quiet
        cand = (live[:, :, None] + logp.view(n, width, V)).view(n, width * V)
        cand_scores, cand_idx = cand.topk(min(n_cand, width * V), dim=1)  # (n, 2K) best first
        if cand_scores.size(1) < n_cand:  # step 0 with V < 2K: pad with no-beam candidates
            fill = n_cand - cand_scores.size(1)
            cand_scores = torch.cat([cand_scores, cand_scores.new_full((n, fill), neg_inf)], 1)
            cand_idx = torch.cat([cand_idx, cand_idx.new_zeros(n, fill)], 1)
        cand_beam, cand_tok = cand_idx // V, cand_idx % V
        finite = cand_scores > neg_inf
        is_eos = cand_tok == eos

        # Next live beams: the first K non-EOS candidates, in rank order.
        pick = torch.argsort(is_eos.long(), dim=1, stable=True)[:, :K]
        if width == K and sync_free:  # each beam's first child stays in its row (module doc)
            pick = _take(pick, _in_parent_rows(_take(cand_beam, pick)))
        new_live, new_beam, new_tok = (_take(x, pick) for x in (cand_scores, cand_beam, cand_tok))
        new_history = spare
        if t:  # only the t filled columns move; later ones are pad in both buffers
            index = new_beam[:, :, None].expand(-1, -1, t)
            torch.gather(history[:, :, :t], 1, index, out=new_history[:, :, :t])
        new_history[:, :, t] = new_tok

        # Finish EOS among the best K, and every live beam at the length limit.
        eos_ok = is_eos & finite & first_k
        at_limit = (limits <= t + 1)[:, None] & (new_live > neg_inf)
        add_raw = torch.cat(
            [cand_scores.masked_fill(~eos_ok, neg_inf), new_live.masked_fill(~at_limit, neg_inf)],
            dim=1,
        )
        rows: Tensor | None = None  # the sentences that finish something now; None: all
        if sync_free:
            rows = (add_raw > neg_inf).any(dim=1).nonzero().squeeze(1)
            rows = None if rows.numel() == n else rows
        if rows is None or rows.numel():
            past, now, beams = history, new_history, cand_beam
            if rows is not None:
                past, now, beams = (x.index_select(0, rows) for x in (history, now, beams))
                add_raw = add_raw.index_select(0, rows)
            # (m, 3K, t + 1): an EOS-finished candidate's tokens end before column t.
            add_tokens = torch.cat([_take(past[:, :, : t + 1], beams), now[:, :, : t + 1]], dim=1)
            # Everything finished at this step has t + 1 scored tokens.
            pool.add(rows, add_raw, add_len + t, add_tokens, length_penalty(t + 1, alpha))

        done = done | (pool.rank > neg_inf).all(dim=1) | (limits <= t + 1)
        live, history, spare = new_live, new_history, history
        flat = (first_row[:n] * width + new_beam).view(-1)  # (n K,) each new row's old row
        tokens = new_tok.view(-1)
        n_done = 0
        if check_every and (t + 1) % check_every == 0:  # the one host sync per check_every
            n_done = int(done.sum())
            if n_done == n:
                break
        # Not at step 0, which also expands the rows to K beams: a state recognises a
        # plain expansion (and then shares the source side among the beams).
        if compact and t and n_done >= COMPACT_FRACTION * n:  # n_done >= 1 (n >= 1)
            keep, gone = (~done).nonzero().squeeze(1), done.nonzero().squeeze(1)
            if out is None:
                out = _Pool.empty(B, nbest, bound, model.pad_id, live)
            out.put(ids.index_select(0, gone), pool.rows(gone).head(nbest))
            pool = pool.rows(keep)
            ids, live, history, spare, limits, done = (
                x.index_select(0, keep) for x in (ids, live, history, spare, limits, done)
            )
            tokens = tokens.view(n, K).index_select(0, keep).view(-1)
            # Whole sentences go: the state may keep its source side shared (DecoderState).
            state = state.reorder(flat.view(n, K).index_select(0, keep).view(-1))
        else:
            # Step 0 copies each row K times (no group yet); later beams stay in their sentence.
            state = state.reorder(flat, group_size=K if width == K else None)
        width = K

    assert pool is not None
    if out is None:  # nothing left the batch: the pool is in src_ids' order
        out = pool.head(nbest)
    else:
        out.put(ids, pool.head(nbest))
    filled = (out.rank > neg_inf).tolist()
    tokens_, lens, raws = out.tokens.tolist(), out.length.tolist(), out.raw.tolist()
    return DecodeResult.from_nbest(
        [
            [Hypothesis(toks[:n], s) for toks, n, s, ok in zip(r, ln, rw, f) if ok]
            for r, ln, rw, f in zip(tokens_, lens, raws, filled)
        ]
    )
