"""The fast decoding path (``StaticCacheStepper``: a static KV cache, optionally compiled)
against the reference path (the model's own growing cache)."""

from __future__ import annotations

import warnings

import pytest
import torch

from attnkit.attention import KVCache, StaticKVCache
from attnkit.decoding import (
    StaticCacheStepper,
    SupportsStaticCache,
    beam_search,
    greedy_search,
    sample,
)
from attnkit.decoding.common import SearchSettings, resolve_check_every
from attnkit.decoding.constraints import MinLength
from attnkit.decoding.static import capacity_bucket, source_bucket
from attnkit.errors import UsageError
from attnkit.inference import stepper_for
from attnkit.models import (
    DecoderOnlyConfig,
    DecoderOnlyLM,
    EncoderDecoder,
    RNNSeq2Seq,
    RNNSeq2SeqConfig,
    TransformerConfig,
)

LIMIT = 10


def tiny(norm: str = "post", *, dtype=torch.float64, layers: int = 2, **kw) -> EncoderDecoder:
    """A tiny random model whose EOS is likely enough that some outputs end early."""
    config = TransformerConfig.from_preset(
        "small",
        d_model=32,
        num_heads=4,
        d_ff=64,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
        src_vocab_size=24,
        tgt_vocab_size=24,
        dropout=0.0,
        norm_position=norm,
        share_embeddings="none",
        **kw,
    )
    torch.manual_seed(0)
    model = EncoderDecoder(config).to(dtype).eval()
    with torch.no_grad():
        model.output_proj.weight[model.eos_id] *= 2.0
    return model


def batch() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 24, (6, 7), generator=g)
    src[1, 4:] = 0  # padded rows
    src[3, 2:] = 0
    return src


def search(model, src, beam: int):
    return search_with(model, src, beam, None)


def search_with(model, src, beam: int, settings: SearchSettings | None):
    if beam == 1:
        return greedy_search(model, src, max_len=LIMIT, search=settings)
    return beam_search(model, src, beam_size=beam, alpha=0.6, max_len=LIMIT, search=settings)


def both_paths(model, src, beam: int):
    return search(model, src, beam), search(StaticCacheStepper(model), src, beam)


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("beam", [1, 4])
def test_fast_path_gives_the_reference_tokens_and_scores(norm, beam):
    model, src = tiny(norm), batch()
    reference, fast = both_paths(model, src, beam)
    assert fast.tokens == reference.tokens
    assert fast.scores == pytest.approx(reference.scores, abs=1e-5)
    lengths = [len(t) for t in fast.tokens]
    assert min(lengths) < LIMIT - 1 and max(lengths) == LIMIT  # some end early, some run out
    if beam > 1:
        for got, want in zip(fast.nbest, reference.nbest):
            assert [h.tokens for h in got] == [h.tokens for h in want]


def test_fast_path_in_float32_and_with_sampling():
    model, src = tiny(dtype=torch.float32), batch()
    reference, fast = both_paths(model, src, 4)
    assert fast.tokens == reference.tokens
    draws = []
    for stepper in (model, StaticCacheStepper(model)):
        g = torch.Generator().manual_seed(3)
        draws.append(sample(stepper, src, generator=g, max_len=LIMIT).tokens)
    assert draws[0] == draws[1]


def test_start_picks_the_cache_by_bound_and_support():
    model, src = tiny(), batch()
    fast = StaticCacheStepper(model)
    assert isinstance(fast.start(src, max_steps=LIMIT).cache, StaticKVCache)
    assert fast.start(src, max_steps=LIMIT).cache.capacity == LIMIT
    assert isinstance(fast.start(src).cache, KVCache)  # no bound given: growing cache
    assert isinstance(model.start(src, max_steps=LIMIT).cache, KVCache)  # the model's own
    too_long = model.config.max_len + 1  # past the position table: the reference path
    assert isinstance(fast.start(src, max_steps=too_long).cache, KVCache)
    relative = tiny(positions="relative")  # relative positions need the growing cache
    assert relative.cache_layout() is None
    assert isinstance(StaticCacheStepper(relative).start(src, max_steps=LIMIT).cache, KVCache)


def test_capabilities_are_declared_not_probed():
    rnn = RNNSeq2Seq(RNNSeq2SeqConfig.from_preset("small", src_vocab_size=24, tgt_vocab_size=24))
    assert isinstance(tiny(), SupportsStaticCache)
    assert not isinstance(rnn, SupportsStaticCache)
    assert stepper_for(rnn) is rnn  # fast = the only path an RNN has
    model = tiny()  # on the CPU the fast path is the model's own prefix cache
    assert stepper_for(model) is model
    assert isinstance(stepper_for(model, "compiled"), StaticCacheStepper)
    assert stepper_for(rnn, "reference") is rnn
    with pytest.raises(ValueError, match="no static-cache step"):
        stepper_for(rnn, "compiled")


def test_min_length_passes_max_steps_through():
    model, src = tiny(), batch()
    forced = MinLength(StaticCacheStepper(model), LIMIT)
    assert isinstance(forced.start(src, max_steps=LIMIT).cache, StaticKVCache)
    out = greedy_search(forced, src, max_len=LIMIT)
    assert [len(t) for t in out.tokens] == [LIMIT] * src.size(0)
    assert greedy_search(MinLength(model, LIMIT), src, max_len=LIMIT).tokens == out.tokens


def test_static_step_refuses_to_overflow_its_capacity():
    model, src = tiny(), batch()
    fast = StaticCacheStepper(model)
    state = fast.start(src, max_steps=2)
    tokens = torch.full((src.size(0),), model.bos_id)
    for _ in range(2):
        _, state = fast.step(tokens, state)
    with pytest.raises(ValueError, match="capacity"):
        fast.step(tokens, state)


def test_prefix_of_several_tokens_matches_the_reference():
    model, src = tiny(), batch()
    fast = StaticCacheStepper(model)
    prefix = torch.tensor([[model.bos_id, 5, 6]] * src.size(0))
    want, _ = model.step(prefix, model.start(src))
    got, state = fast.step(prefix, fast.start(src, max_steps=6))
    torch.testing.assert_close(got, want)
    assert state.cache.length == 3 and state.cache.pos.tolist() == [3]


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_decoder_only_static_path_gives_the_reference_tokens(positions):
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=4, d_ff=64, num_layers=2, vocab_size=24, max_len=40,
        dropout=0.0, positions=positions,
    )  # fmt: skip
    torch.manual_seed(0)
    lm = DecoderOnlyLM(config).double().eval()
    prompt = torch.randint(3, 24, (3, 5), generator=torch.Generator().manual_seed(2))
    for search_fn in (greedy_search, lambda m, p, **kw: beam_search(m, p, beam_size=3, **kw)):
        want = search_fn(lm, prompt, max_len_a=0.0, max_len_b=12)
        got = search_fn(StaticCacheStepper(lm), prompt, max_len_a=0.0, max_len_b=12)
        assert got.tokens == want.tokens
        assert got.scores == pytest.approx(want.scores, abs=1e-9)


def test_check_every_comes_from_the_settings_handed_in():
    assert resolve_check_every(None, None) == 1  # the CPU's default
    assert resolve_check_every(None, SearchSettings(check_every=8, sync_free=False)) == 8
    assert resolve_check_every(3, SearchSettings(check_every=8)) == 3  # given: kept
    with pytest.raises(UsageError, match="check_every"):
        resolve_check_every(-1, None)


def test_settings_that_differ_change_the_work_not_the_outputs():
    model, src = tiny(), batch()
    accelerator = SearchSettings(check_every=8, sync_free=False)  # a GPU's plan, on the CPU
    for k in (1, 3):
        assert search(model, src, k).nbest == search_with(model, src, k, accelerator).nbest


def test_a_failing_compiler_falls_back_to_eager_with_a_warning(monkeypatch):
    model, src = tiny(), batch()
    reference = search(model, src, 1)

    def broken(fn, **kwargs):
        def run(*args):
            raise RuntimeError("no compiler here")

        return run

    monkeypatch.setattr(torch, "compile", broken)
    compiled = StaticCacheStepper(model, compile=True)
    with pytest.warns(RuntimeWarning, match="compiled decode step failed"):
        fast = search(compiled, src, 1)
    assert fast.tokens == reference.tokens
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once; eager from then on
        assert search(compiled, src, 1).tokens == reference.tokens


@pytest.mark.slow
def test_capacity_buckets_are_powers_of_two_within_the_model():
    assert [capacity_bucket(n, 512) for n in (1, 64, 65, 100, 129, 300)] == [
        64, 64, 128, 128, 256, 512]  # fmt: skip
    assert capacity_bucket(40, 48) == 48  # capped at max_positions
    assert capacity_bucket(50, 48) == 50  # never below what was asked


@pytest.fixture
def counter(monkeypatch):
    """``torch.compile`` as dynamo with a counting backend (no inductor: fast), the way a
    compiled stepper calls it; the counter says how many programs were compiled."""
    from torch._dynamo.testing import CompileCounter

    counted, real = CompileCounter(), torch.compile

    def counting(fn, **kwargs):
        return real(fn, backend=counted, fullgraph=True, dynamic=False)

    monkeypatch.setattr(torch, "compile", counting)
    return counted


def test_new_prompt_lengths_do_not_recompile_the_step(counter, fresh_dynamo):
    # dynamo with a counting backend (no inductor: fast): prompts of 3, 7 and 20 tokens
    # share one bucket (64) and their prompt passes run eagerly, so one graph is compiled
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=4, d_ff=64, num_layers=1, vocab_size=24, max_len=64,
        dropout=0.0, positions="rotary", norm="rmsnorm",
    )  # fmt: skip
    torch.manual_seed(0)
    lm = DecoderOnlyLM(config).double().eval()
    compiled = StaticCacheStepper(lm, compile=True)
    for length in (3, 7, 20):
        prompt = torch.randint(3, 24, (1, length), generator=torch.Generator().manual_seed(length))
        want = greedy_search(lm, prompt, max_len_a=0.0, max_len_b=10)
        assert compiled.start(prompt, max_steps=11).cache.capacity == 64
        assert greedy_search(compiled, prompt, max_len_a=0.0, max_len_b=10).tokens == want.tokens
    assert counter.frame_count == 1


def test_compiled_decode_step_gives_the_same_tokens(fresh_dynamo):
    # Inductor on CPU (a C++ compiler is needed): ~15-20 s cold on 2 cores, so slow.
    from torch._dynamo.utils import counters

    model, src = tiny(dtype=torch.float32, layers=1), batch()
    want = {k: search(model, src, k) for k in (1, 4)}
    compiled = StaticCacheStepper(model, compile=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*compiled decode step")  # no silent fallback
        for k in (1, 4):
            got = search(compiled, src, k)
            assert got.tokens == want[k].tokens
            assert got.scores == pytest.approx(want[k].scores, abs=1e-4)
        graphs = counters["stats"]["unique_graphs"]
        assert search(compiled, src, 4).tokens == want[4].tokens  # same shapes: no recompile
        assert counters["stats"]["unique_graphs"] == graphs


def test_the_frozen_mode_freezes_the_weights(monkeypatch, fresh_dynamo):
    # The CPU's compiled step (mode FROZEN) must reach inductor's freezing, which dynamo
    # gates on the global config (an option to torch.compile alone freezes nothing);
    # inductor's caches are off so that the compile, and its freezing, really run.
    import torch._inductor.freezing as freezing

    from attnkit.decoding.static import FROZEN

    monkeypatch.setattr(torch._inductor.config, "fx_graph_cache", False)
    monkeypatch.setattr(torch._functorch.config, "enable_autograd_cache", False)
    kept: list[int] = []  # per compile: the graph inputs that freezing left as inputs
    real = freezing.freeze

    def spy(*args, **kwargs):
        frozen_gm, preserved = real(*args, **kwargs)
        kept.append(len(preserved))
        return frozen_gm, preserved

    monkeypatch.setattr(freezing, "freeze", spy)
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=4, d_ff=64, num_layers=1, vocab_size=24, max_len=64,
        dropout=0.0, positions="rotary", norm="rmsnorm",
    )  # fmt: skip
    torch.manual_seed(0)
    model = DecoderOnlyLM(config).eval()
    compiled = StaticCacheStepper(model, compile=True, mode=FROZEN)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*compiled decode step")  # no silent fallback
        # scores, not only tokens: a frozen position (a constant where the step reads the
        # cache's position) changes every step's log-probs after the first, where a tiny
        # random model's argmax may not move; two prompts run on one compiled step
        for length in (3, 5):
            prompt = torch.randint(
                3, 24, (1, length), generator=torch.Generator().manual_seed(length)
            )
            want = greedy_search(model, prompt, max_len_a=0.0, max_len_b=12)
            got = greedy_search(compiled, prompt, max_len_a=0.0, max_len_b=12)
            assert got.tokens == want.tokens
            assert got.scores == pytest.approx(want.scores, abs=1e-4)
    # the weights became constants: what stays an input is the step's own tensors
    # (token, caches, position), far fewer than the model's parameters
    weights = len(list(model.parameters()))
    assert kept and max(kept) < weights // 2, (kept, weights)
    assert torch._inductor.config.freezing is False  # and the global flag restored


def test_source_buckets_are_powers_of_two_within_the_model():
    assert [source_bucket(n, 512) for n in (1, 8, 9, 16, 17, 100)] == [8, 8, 16, 16, 32, 128]
    assert source_bucket(40, 48) == 48 and source_bucket(50, 48) == 50


def test_sources_of_other_lengths_share_a_compiled_step(counter, fresh_dynamo):
    # dynamo with a counting backend: source batches 9, 12 and 15 tokens wide are padded
    # to 16 (masked), their caches sized 64, so one graph serves all three; the outputs
    # and scores are the uncompiled model's
    model = tiny()
    compiled = StaticCacheStepper(model, compile=True)
    g = torch.Generator().manual_seed(3)
    for width in (9, 12, 15):
        src = torch.randint(3, 24, (2, width), generator=g)
        src[1, width - 3 :] = model.pad_id  # a padded row too
        want = greedy_search(model, src, max_len_b=40)
        got = greedy_search(compiled, src, max_len_b=40)
        assert got.tokens == want.tokens
        assert got.scores == pytest.approx(want.scores, abs=1e-9)
    assert counter.frame_count == 1


def test_more_shapes_than_dynamos_own_limit_stay_compiled(counter, fresh_dynamo):
    # dynamo stops at 8 programs of a function per process; a file's batches and beams
    # need more: ten batch sizes compile ten programs, with no eager fallback
    model = tiny()
    compiled = StaticCacheStepper(model, compile=True)
    src = batch()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*compiled decode step")  # no fallback
        for rows in range(1, 11):
            ids = src[:1].expand(rows, -1).contiguous()
            want = greedy_search(model, ids, max_len_b=10)
            assert greedy_search(compiled, ids, max_len_b=10).tokens == want.tokens
    assert counter.frame_count == 10 and not compiled.fell_back
    assert torch._dynamo.config.recompile_limit == 8  # restored after each call
