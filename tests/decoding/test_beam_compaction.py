"""Beam search's batch tricks (issue 25) against the search as it was before them.

``beam_search`` runs its first step on the ``B`` unexpanded rows and drops done
sentences from the batch. ``reference_beam_search`` below is the search before
that change (commit c93d380, argument checks left out): every family that beam
search decodes must give the same tokens, and scores within 1e-6. ``Recorder``
wraps a stepper and records each step's batch size, so every test also checks
that the tricks really ran (first step on ``B`` rows, the batch shrinking).

Shapes: ``B`` sentences, ``K`` beams, ``V`` vocabulary, ``T`` the length bound.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import Tensor

from attnkit.attention.static_cache import StaticBufferPool, StaticKVCache
from attnkit.decoding import beam_search
from attnkit.decoding.beam import _in_parent_rows
from attnkit.decoding.common import (
    DecodeResult,
    Hypothesis,
    length_penalty,
    log_probs,
    output_limits,
    resolve_check_every,
)
from attnkit.decoding.static import StaticCacheStepper
from attnkit.inference import stepper_for
from attnkit.models import (
    DecoderOnlyConfig,
    DecoderOnlyLM,
    EncoderDecoder,
    RNNSeq2Seq,
    RNNSeq2SeqConfig,
    TransformerConfig,
)
from attnkit.quantize import quantize_model

V = 50


# -- the search before issue 25 (reference) ---------------------------------------


def _take(x: Tensor, index: Tensor) -> Tensor:
    if x.dim() == 2:
        return x.gather(1, index)
    return x.gather(1, index[:, :, None].expand(-1, -1, x.size(2)))


@torch.no_grad()
def reference_beam_search(
    model, src_ids, *, beam_size=4, alpha=0.6, nbest=1, max_len_a=1.0, max_len_b=50,
    max_len=None, check_every=None, rows_in_place=False,
) -> DecodeResult:  # fmt: skip
    """``beam_search`` before issue 25: every sentence's ``K`` rows from start to end.

    ``rows_in_place``: put the new beams in rows as ``beam_search`` does on the CPU
    (each parent's first child in its parent's row); the search is the same, only
    arithmetic that depends on other rows (int8) can tell.
    """
    limits, bound = output_limits(
        src_ids, model.pad_id, max_len_a=max_len_a, max_len_b=max_len_b, max_len=max_len
    )
    B, K, device, eos = src_ids.size(0), beam_size, src_ids.device, model.eos_id
    check_every = resolve_check_every(check_every, None)  # the CPU's settings
    limits = limits.to(device)
    neg_inf = -math.inf
    state = model.start(src_ids, max_steps=bound)
    state = state.reorder(torch.arange(B, device=device).repeat_interleave(K))
    base = torch.arange(B, device=device)[:, None] * K
    tokens = torch.full((B * K,), model.bos_id, dtype=torch.long, device=device)
    history = torch.full((B, K, bound), model.pad_id, dtype=torch.long, device=device)
    live = pool_raw = pool_rank = None
    pool_tokens = history.clone()
    pool_len = torch.zeros(B, K, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    positions = torch.arange(2 * K, device=device)
    for t in range(bound):
        logits, state = model.step(tokens, state)
        logp = log_probs(logits).view(B, K, -1)
        V = logp.size(2)
        if live is None:
            live = logp.new_full((B, K), neg_inf)
            live[:, 0] = 0.0
            pool_raw = logp.new_full((B, K), neg_inf)
            pool_rank = pool_raw.clone()
        live = live.masked_fill(done[:, None], neg_inf)
        cand = (live[:, :, None] + logp).view(B, K * V)
        cand_scores, cand_idx = cand.topk(min(2 * K, K * V), dim=1)
        cand_beam, cand_tok = cand_idx // V, cand_idx % V
        finite = cand_scores > neg_inf
        is_eos = cand_tok == eos
        pick = torch.argsort(is_eos.long(), dim=1, stable=True)[:, :K]
        if rows_in_place and t:
            pick = _take(pick, _in_parent_rows(_take(cand_beam, pick)))
        new_live, new_beam, new_tok = (_take(x, pick) for x in (cand_scores, cand_beam, cand_tok))
        new_history = _take(history, new_beam)
        new_history[:, :, t] = new_tok
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
        all_rank = torch.cat([pool_rank, add_raw / length_penalty(t + 1, alpha)], dim=1)
        keep = torch.sort(all_rank, dim=1, descending=True, stable=True).indices[:, :K]
        pool_rank = _take(all_rank, keep)
        pool_raw = _take(torch.cat([pool_raw, add_raw], dim=1), keep)
        pool_len = _take(torch.cat([pool_len, add_len], dim=1), keep)
        pool_tokens = _take(torch.cat([pool_tokens, add_tokens], dim=1), keep)
        full = (pool_rank > neg_inf).all(dim=1)
        done = done | full | (limits <= t + 1)
        live, history = new_live, new_history
        state = state.reorder((base + new_beam).view(-1), group_size=K)
        tokens = new_tok.view(-1)
        if check_every and (t + 1) % check_every == 0 and bool(done.all()):
            break
    filled = (pool_rank[:, :nbest] > neg_inf).tolist()
    rows, lens = pool_tokens[:, :nbest].tolist(), pool_len[:, :nbest].tolist()
    raws = pool_raw[:, :nbest].tolist()
    return DecodeResult.from_nbest(
        [
            [Hypothesis(toks[:n], s) for toks, n, s, ok in zip(r, ln, rw, f) if ok]
            for r, ln, rw, f in zip(rows, lens, raws, filled)
        ]
    )


# -- models and helpers -------------------------------------------------------------


class Recorder:
    """A ``Stepper`` around ``inner`` that records each step's batch rows (and the
    ``DecoderState``'s beam group, ``None`` for other states)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.pad_id, self.bos_id, self.eos_id = inner.pad_id, inner.bos_id, inner.eos_id
        self.rows: list[int] = []
        self.groups: list[int | None] = []

    @property
    def fixed_batch(self) -> bool:  # passes on ``FixedBatch``
        return bool(getattr(self.inner, "fixed_batch", False))

    def start(self, src_ids, *, max_steps=None):
        self.rows, self.groups = [], []
        return self.inner.start(src_ids, max_steps=max_steps)

    def step(self, tokens, state):
        self.rows.append(tokens.size(0))
        self.groups.append(getattr(state, "group", None))
        return self.inner.step(tokens, state)


def transformer(dtype: torch.dtype = torch.float64, **kw) -> EncoderDecoder:
    config = TransformerConfig.from_preset(
        "small", d_model=32, num_heads=4, d_ff=64, num_encoder_layers=2, num_decoder_layers=2,
        src_vocab_size=V, tgt_vocab_size=V, dropout=0.0, share_embeddings="none", **kw,
    )  # fmt: skip
    torch.manual_seed(0)
    model = EncoderDecoder(config).to(dtype).eval()
    with torch.no_grad():  # EOS likely enough that some beams finish before their limit
        model.output_proj.weight[model.eos_id] *= 3.0
    return model


def rnn(attention: str, cell: str) -> RNNSeq2Seq:
    config = RNNSeq2SeqConfig(
        embed_dim=16, hidden_size=32, src_vocab_size=V, tgt_vocab_size=V, dropout=0.0,
        attention=attention, cell=cell, input_feeding=attention.startswith("luong"),
    )  # fmt: skip
    torch.manual_seed(0)
    return RNNSeq2Seq(config).double().eval()


def lm() -> DecoderOnlyLM:
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=4, d_ff=64, num_layers=2, vocab_size=V, dropout=0.0
    )
    torch.manual_seed(0)
    return DecoderOnlyLM(config).double().eval()


# float64, so that 1e-6 on a score means something; see FLOAT32 for the others.
FAMILIES = {
    "post-norm": lambda: transformer(),
    "post-norm-fp32": lambda: transformer(torch.float32),
    "pre-norm": lambda: transformer(norm_position="pre"),
    "relative": lambda: transformer(positions="relative"),
    "rotary": lambda: transformer(positions="rotary", num_kv_heads=2),
    "linear": lambda: transformer(attention="linear"),
    "static-cache": lambda: StaticCacheStepper(transformer()),
    "quantized-fp32": lambda: stepper_for(
        quantize_model(transformer(torch.float32), "fp32"), "fast"
    ),
    "rnn-bahdanau-gru": lambda: rnn("bahdanau", "gru"),
    "rnn-luong-lstm": lambda: rnn("luong_general", "lstm"),
    "decoder-only": lm,
}


# A float32 sum of ~20 log-probs resolves ~2e-6; a GEMM over fewer rows may round
# differently (measured: 1.9e-6 on -20.98), so these compare scores to 1e-6 relative.
FLOAT32 = ("post-norm-fp32", "quantized-fp32")


def sources(prompt: bool = False) -> Tensor:
    """Six sentences of 1 to 14 tokens: with ``max_len_b=1`` their limits are 2 to 15,
    so the short ones finish long before the others. A prompt batch has no padding."""
    g = torch.Generator().manual_seed(7)
    src = torch.randint(3, V, (6, 14), generator=g)
    if not prompt:
        for row, n in enumerate([1, 14, 2, 9, 3, 12]):
            src[row, n:] = 0
    return src[:, :4] if prompt else src


def assert_same(got: DecodeResult, want: DecodeResult, *, rel: float = 0.0) -> None:
    assert [[h.tokens for h in hyps] for hyps in got.nbest] == [
        [h.tokens for h in hyps] for hyps in want.nbest
    ]
    for g, w in zip(got.nbest, want.nbest):
        assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-6, rel=rel)


def both(model, src: Tensor, **kw) -> tuple[DecodeResult, DecodeResult, Recorder]:
    recorder = Recorder(model)
    return beam_search(recorder, src, **kw), reference_beam_search(model, src, **kw), recorder


# -- the tests ----------------------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("beam", [1, 2, 4, 5])
def test_same_results_as_before_and_the_batch_shrinks(family, beam):
    model = FAMILIES[family]()
    src = sources(prompt=family == "decoder-only")
    B = src.size(0)
    for alpha, nbest, max_len in [(0.6, 1, None), (0.0, beam, None), (0.6, min(2, beam), 6)]:
        kw = dict(beam_size=beam, alpha=alpha, nbest=nbest, max_len_b=1, max_len=max_len)
        if family == "decoder-only":  # no source lengths: limits from max_len, cut early
            kw.update(max_len_a=0.0, max_len_b=12)
        got, want, rec = both(model, src, **kw)
        assert_same(got, want, rel=1e-6 if family in FLOAT32 else 0.0)
        assert rec.rows[0] == B  # the first step on the unexpanded batch
        if len(rec.rows) > 1:
            assert rec.rows[1] == B * beam
        assert all(a >= b for a, b in zip(rec.rows[1:], rec.rows[2:]))  # never grows back
        if family != "decoder-only" and max_len is None:
            assert min(rec.rows) < B * beam  # short sentences left the batch
            assert all(r % beam == 0 for r in rec.rows[1:])  # whole sentences go


def test_lengths_differ_and_some_outputs_end_with_eos():
    # The comparisons above mean something only if outputs end both ways.
    got = beam_search(transformer(), sources(), beam_size=4, max_len_b=1)
    limits = [2, 15, 3, 10, 4, 13]
    assert any(len(t) < n for t, n in zip(got.tokens, limits))
    assert len({len(t) for t in got.tokens}) > 2


def test_quantized_int8_keeps_its_rows_and_its_results():
    # int8 linears quantise their input per tensor: a row's outputs depend on the
    # other rows, so an int8 model declares FixedBatch (dropping rows changed tokens,
    # measured); the first step on the unexpanded rows is still exact (K equal copies).
    # Done sentences' idle rows feed whatever their rows hold, which depends on where
    # the beams were put: so the reference puts them where the search does.
    model = stepper_for(quantize_model(transformer(torch.float32), "int8"), "fast")
    for beam in (1, 4):
        kw = dict(beam_size=beam, nbest=beam, max_len_b=1)
        rec = Recorder(model)
        got = beam_search(rec, sources(), **kw)
        want = reference_beam_search(model, sources(), rows_in_place=True, **kw)
        assert_same(got, want)
        assert rec.rows[0] == 6 and set(rec.rows[1:]) == {6 * beam}


def test_the_source_side_stays_shared_after_dropping():
    rec = Recorder(transformer())
    beam_search(rec, sources(), beam_size=4, max_len_b=1)
    assert rec.groups[0] == 1 and set(rec.groups[1:]) == {4}  # never per-row copies
    assert len(set(rec.rows)) > 2


@pytest.mark.parametrize("check_every", [0, 3])
def test_drops_only_when_the_search_syncs(check_every):
    model = transformer()
    got, want, rec = both(model, sources(), beam_size=4, max_len_b=1, check_every=check_every)
    assert_same(got, want)
    changes = [t for t in range(2, len(rec.rows)) if rec.rows[t] != rec.rows[t - 1]]
    if check_every == 0:  # never asks the host: every row to the end, as before
        assert not changes and len(rec.rows) == 15
    else:  # rows leave after step t (0-based) with (t + 1) % 3 == 0, fed at t + 1
        assert changes and all(t % check_every == 0 for t in changes)


def test_a_fixed_batch_stepper_keeps_its_rows():
    stepper = StaticCacheStepper(transformer())
    stepper.fixed_batch = True  # as compile=True declares it (without compiling here)
    got, want, rec = both(stepper, sources(), beam_size=4, max_len_b=1)
    assert_same(got, want)
    assert rec.rows[0] == 6 and set(rec.rows[1:]) == {24}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("beam", [2, 4, 5])
def test_toy_chains_match_including_a_vocabulary_below_2k(toy, tables, seed, beam):
    # V = 6 < 2K for K >= 4: the first step pads its candidates with no-beam ones.
    for vocab in (6, 12):
        model = toy(tables.random(vocab, seed, eos_bias=1.0), src_table=torch.randn(vocab, vocab))
        src = torch.tensor([[3, 0, 0, 0, 0], [4, 5, 3, 4, 5], [5, 3, 0, 0, 0], [3, 4, 5, 0, 0]])
        for alpha in (0.0, 0.6):
            got, want, _ = both(model, src, beam_size=beam, alpha=alpha, nbest=2, max_len_b=2)
            assert_same(got, want)


def test_static_cache_reorders_to_fewer_rows_pooled():
    pool = StaticBufferPool(mark_static=False)
    cross = torch.randn(2, 6, 2, 5, 4)
    cache = StaticKVCache.allocate(
        2, 6, 2, 4, capacity=8, dtype=torch.float32, device="cpu",
        cross_k=cross, cross_v=cross + 1, pool=pool,
    )  # fmt: skip
    for layer in range(2):
        cache.update_layer(layer, torch.randn(6, 2, 1, 4), torch.randn(6, 2, 1, 4))
    cache.advance()
    before = copy.deepcopy((cache.self_k, cache.self_v))
    keep = torch.tensor([1, 4])
    cache.reorder(keep, cross=torch.tensor([0, 2]))
    for layer in range(2):
        assert torch.equal(cache.self_k[layer], before[0][layer][keep])
        assert torch.equal(cache.self_v[layer], before[1][layer][keep])
    assert torch.equal(cache.cross_k, cross[:, [0, 2]])


@pytest.mark.parametrize("seed", range(5))
def test_new_beams_go_to_their_parents_rows_where_they_can(seed):
    torch.manual_seed(seed)
    K = 5
    parent = torch.randint(0, K, (40, K))  # best first: the row each new beam continues
    row_of = _in_parent_rows(parent)  # the candidate placed in each row
    assert torch.equal(row_of.sort(dim=1).values, torch.arange(K).expand(40, K))
    for p, order in zip(parent.tolist(), row_of.tolist()):
        for row in set(p):  # a parent's first child stays in the parent's row
            assert order[row] == p.index(row)
        rest = [order[row] for row in range(K) if row not in set(p)]
        assert rest == sorted(rest)  # the other children fill the other rows, in rank order


def test_the_cpu_search_moves_the_fewest_cache_rows(monkeypatch):
    from attnkit.attention.cache import KVCache

    K, moved, fewest = 4, [], []
    reorder = KVCache.reorder

    def counted(self, indices, *, cross=True):
        if indices.numel() == self.self_k.size(1):  # a beam step, not the expansion
            moved.append(int((indices != torch.arange(indices.numel())).sum()))
            fewest.append(sum(K - len(set(g)) for g in indices.view(-1, K).tolist()))
        return reorder(self, indices, cross=cross)

    monkeypatch.setattr(KVCache, "reorder", counted)
    beam_search(transformer(), sources(), beam_size=K, max_len_b=4, compact=False)
    assert len(moved) > 3 and moved == fewest  # only the rows whose beam had no child
