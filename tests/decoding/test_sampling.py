"""Sampling on a toy Markov chain: reproducibility, filters, the distribution drawn."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from attnkit.decoding import filter_logits, greedy_search, sample
from attnkit.errors import UsageError

BOS, EOS, PAD = 1, 2, 0


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _model(toy, tables, seed: int = 0):
    return toy(tables.random(10, seed, scale=0.5, eos_bias=0.5), src_table=torch.randn(10, 10))


SRC = torch.tensor([[3, 4, 5, 0], [6, 7, 8, 9], [4, 0, 0, 0], [9, 3, 3, 0]] * 2)


def test_same_seed_same_output_different_seed_different_output(toy, tables):
    model = _model(toy, tables)
    first = sample(model, SRC, generator=_gen(7))
    assert sample(model, SRC, generator=_gen(7)) == first
    assert sample(model, SRC, generator=_gen(8)).tokens != first.tokens


def test_scores_are_the_models_log_probs_of_the_drawn_tokens(toy, tables):
    model = _model(toy, tables)
    result = sample(model, SRC, temperature=1.7, top_k=5, generator=_gen(3))
    for row, tokens in enumerate(result.tokens):
        src_bias = (model.src_table[SRC[row]] * (SRC[row] != PAD)[:, None]).sum(0)
        path = [BOS, *tokens] + ([EOS] if len(tokens) < int((SRC[row] != PAD).sum()) + 50 else [])
        expected = sum(float(model.log_probs(a, src_bias)[b]) for a, b in itertools.pairwise(path))
        assert result.scores[row] == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("options", [{"top_k": 1}, {"top_p": 1e-6}, {"top_k": 1, "top_p": 0.5}])
def test_keeping_only_the_top_token_is_greedy(toy, tables, options):
    model = _model(toy, tables, seed=1)
    greedy = greedy_search(model, SRC)
    drawn = sample(model, SRC, temperature=3.0, generator=_gen(0), **options)
    assert drawn.tokens == greedy.tokens
    assert drawn.scores == greedy.scores


@pytest.mark.parametrize(
    ("options", "temperature"),
    [({}, 1.0), ({}, 2.5), ({"top_k": 3}, 1.0), ({"top_p": 0.6}, 0.8)],
)
def test_first_token_follows_the_filtered_softmax(toy, tables, options, temperature):
    table = tables.random(8, 2, scale=1.0)
    model = toy(table)
    n = 40_000
    src = torch.full((n, 1), 3)
    drawn = sample(model, src, temperature=temperature, generator=_gen(1), max_len=1, **options)
    first = torch.tensor([t[0] if t else EOS for t in drawn.tokens])
    counts = torch.bincount(first, minlength=8).double() / n
    expected = filter_logits(table[BOS][None], temperature=temperature, **options)
    expected = expected.softmax(-1)[0].double()
    assert torch.allclose(counts, expected, atol=0.012), (counts, expected)
    # Filters really removed mass: filtered-out tokens are never drawn.
    assert bool((counts[expected == 0] == 0).all())


def test_filter_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.05, 0.3, 0.15]]))

    def keep(**kw):
        return torch.isfinite(filter_logits(logits, temperature=1.0, **kw))[0].tolist()

    assert keep(top_k=0, top_p=1.0) == [True] * 4
    assert keep(top_k=2, top_p=1.0) == [True, False, True, False]
    assert keep(top_k=0, top_p=0.5) == [True, False, False, False]
    assert keep(top_k=0, top_p=0.51) == [True, False, True, False]
    assert keep(top_k=0, top_p=0.95) == [True, False, True, True]
    assert keep(top_k=0, top_p=0.96) == [True, True, True, True]


def test_max_length_is_source_length_plus_50(toy, tables):
    table = tables.random(8, 6)
    table[:, EOS] = -math.inf
    src = torch.tensor([[3, 4, 5, 0, 0, 0, 0], [3, 4, 5, 6, 7, 3, 4]])
    result = sample(toy(table), src, generator=_gen(0))
    assert [len(t) for t in result.tokens] == [53, 57]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0}, "temperature must be in (0, inf), got 0.0"),
        ({"temperature": -1}, "temperature must be in (0, inf), got -1"),
        ({"temperature": math.nan}, "temperature must be in (0, inf), got nan"),
        ({"top_k": -1}, "top_k must be an integer >= 0, got -1"),
        ({"top_p": 0.0}, "top_p must be in (0, 1], got 0.0"),
        ({"top_p": 1.5}, "top_p must be in (0, 1], got 1.5"),
    ],
)
def test_bad_options_raise_usage_errors_naming_them(toy, tables, kwargs, message):
    with pytest.raises(UsageError) as info:
        sample(toy(tables.random(6, 0)), torch.tensor([[3, 4]]), **kwargs)
    assert str(info.value) == message


def test_transformer_sampling_is_reproducible_and_scored_right(tiny_transformer, rescore):
    model = tiny_transformer
    src = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]])
    result = sample(model, src, top_p=0.9, generator=_gen(5), max_len=8)
    assert sample(model, src, top_p=0.9, generator=_gen(5), max_len=8) == result
    for row, tokens in enumerate(result.tokens):
        assert result.scores[row] == pytest.approx(rescore(model, src[row], tokens, 8)[0], abs=1e-9)


@pytest.mark.parametrize("temperature", [1e-300, 1e-45, 1.0, 1e30, 1e300])
@pytest.mark.parametrize("top_p", [1e-300, 0.5, 1.0])
def test_every_accepted_temperature_and_top_p_gives_a_distribution(temperature, top_p):
    """No NaN or inf probabilities at the ends of the accepted ranges (a tiny temperature
    once overflowed to inf - inf; top_p=1e-300 rounds to 0 in float32 and dropped all)."""
    logits = torch.randn(3, 11) * 4
    logits[0, 3] = float("-inf")  # a token filtered out before
    probs = filter_logits(logits, temperature=temperature, top_k=5, top_p=top_p).softmax(-1)
    assert torch.isfinite(probs).all() and torch.allclose(probs.sum(-1), torch.ones(3))
    torch.multinomial(probs, 1)
    # Only the best token is left (a huge temperature flattens the logits into ties).
    if temperature < 1e-40 or (top_p < 1e-40 and temperature <= 1.0):
        assert torch.equal(probs.argmax(-1), logits.argmax(-1))
        assert probs.max(-1).values.eq(1).all()
