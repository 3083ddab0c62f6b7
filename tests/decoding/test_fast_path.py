"""The fast decoding path (static KV cache, optionally compiled) against the reference path."""

from __future__ import annotations

import warnings

import pytest
import torch

from attnkit.attention import KVCache, StaticKVCache
from attnkit.decoding import beam_search, greedy_search, sample, start_decoding
from attnkit.decoding.common import CHECK_EVERY_ACCELERATOR, resolve_check_every
from attnkit.decoding.constraints import MinLength
from attnkit.errors import UsageError
from attnkit.models import EncoderDecoder, TransformerConfig

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
    if beam == 1:
        return greedy_search(model, src, max_len=LIMIT)
    return beam_search(model, src, beam_size=beam, alpha=0.6, max_len=LIMIT)


def both_paths(model, src, beam: int):
    model.fast_decoding = False
    reference = search(model, src, beam)
    model.fast_decoding = True
    return reference, search(model, src, beam)


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
    for fast_on in (False, True):
        model.fast_decoding = fast_on
        g = torch.Generator().manual_seed(3)
        draws.append(sample(model, src, generator=g, max_len=LIMIT).tokens)
    assert draws[0] == draws[1]


def test_start_picks_the_cache_by_flag_and_support():
    model, src = tiny(), batch()
    assert isinstance(start_decoding(model, src, LIMIT).cache, StaticKVCache)
    assert start_decoding(model, src, LIMIT).cache.capacity == LIMIT
    assert isinstance(model.start(src).cache, KVCache)  # no bound given: growing cache
    model.fast_decoding = False
    assert isinstance(start_decoding(model, src, LIMIT).cache, KVCache)
    model.fast_decoding = True
    too_long = model.config.max_len + 1  # past the position table: the reference path
    assert isinstance(start_decoding(model, src, too_long).cache, KVCache)
    relative = tiny(positions="relative")
    assert isinstance(start_decoding(relative, src, LIMIT).cache, KVCache)


def test_min_length_passes_max_steps_through():
    model, src = tiny(), batch()
    forced = MinLength(model, LIMIT)
    assert forced.accepts_max_steps
    assert isinstance(start_decoding(forced, src, LIMIT).cache, StaticKVCache)
    out = greedy_search(forced, src, max_len=LIMIT)
    assert [len(t) for t in out.tokens] == [LIMIT] * src.size(0)
    model.fast_decoding = False
    assert greedy_search(forced, src, max_len=LIMIT).tokens == out.tokens


def test_static_step_refuses_to_overflow_its_capacity():
    model, src = tiny(), batch()
    state = start_decoding(model, src, 2)
    tokens = torch.full((src.size(0),), model.bos_id)
    for _ in range(2):
        _, state = model.step(tokens, state)
    with pytest.raises(ValueError, match="capacity"):
        model.step(tokens, state)


def test_prefix_of_several_tokens_matches_the_reference():
    model, src = tiny(), batch()
    prefix = torch.tensor([[model.bos_id, 5, 6]] * src.size(0))
    want, _ = model.decode_step(prefix, model.start(src))
    got, state = model.decode_step(prefix, model.start(src, max_steps=6))
    torch.testing.assert_close(got, want)
    assert state.cache.length == 3 and state.cache.pos.tolist() == [3]


def test_check_every_defaults_by_device():
    assert resolve_check_every(None, torch.device("cpu")) == 1
    assert resolve_check_every(None, torch.device("cuda")) == CHECK_EVERY_ACCELERATOR
    assert resolve_check_every(3, torch.device("cuda")) == 3
    with pytest.raises(UsageError, match="check_every"):
        resolve_check_every(-1, torch.device("cpu"))


def test_a_failing_compiler_falls_back_to_eager_with_a_warning(monkeypatch):
    model, src = tiny(), batch()
    reference = search(model, src, 1)

    def broken(fn, **kwargs):
        def run(*args):
            raise RuntimeError("no compiler here")

        return run

    monkeypatch.setattr(torch, "compile", broken)
    model.compile_decoding()
    with pytest.warns(RuntimeWarning, match="compile_decoding"):
        fast = search(model, src, 1)
    assert fast.tokens == reference.tokens
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once; eager from then on
        assert search(model, src, 1).tokens == reference.tokens
    model.compile_decoding(False)


@pytest.mark.slow
def test_compiled_decode_step_gives_the_same_tokens():
    # Inductor on CPU (a C++ compiler is needed): ~15-20 s cold on 2 cores, so slow.
    from torch._dynamo.utils import counters

    model, src = tiny(dtype=torch.float32, layers=1), batch()
    model.fast_decoding = False
    want = {k: search(model, src, k) for k in (1, 4)}
    model.fast_decoding = True
    model.compile_decoding()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="compile_decoding")  # no silent fallback
            for k in (1, 4):
                got = search(model, src, k)
                assert got.tokens == want[k].tokens
                assert got.scores == pytest.approx(want[k].scores, abs=1e-4)
            graphs = counters["stats"]["unique_graphs"]
            assert search(model, src, 4).tokens == want[4].tokens  # same shapes: no recompile
            assert counters["stats"]["unique_graphs"] == graphs
    finally:
        model.compile_decoding(False)
