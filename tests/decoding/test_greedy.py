"""Greedy search on a toy Markov chain: values, lengths, batching, options."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.decoding import DecodeResult, Hypothesis, greedy_search, output_limits
from attnkit.errors import UsageError

BOS, EOS, PAD = 1, 2, 0


def _walk(model, limit: int, bias=None) -> tuple[list[int], float]:
    """Greedy by hand: follow the argmax until EOS or ``limit`` tokens."""
    prev, tokens, score = BOS, [], 0.0
    for _ in range(limit):
        logp = model.log_probs(prev, bias)
        prev = int(logp.argmax())
        score += float(logp[prev])
        if prev == EOS:
            break
        tokens.append(prev)
    return tokens, score


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_greedy_follows_the_argmax_chain(toy, tables, seed):
    model = toy(tables.random(9, seed, eos_bias=1.0))
    src = torch.tensor([[5, 6, 7]])
    result = greedy_search(model, src, max_len=12)
    tokens, score = _walk(model, 12)
    assert isinstance(result, DecodeResult)
    assert result.tokens == [tokens]
    assert result.scores[0] == pytest.approx(score, abs=1e-5)
    assert result.nbest == [[Hypothesis(tokens, result.scores[0])]]


def test_step_sees_bos_first_then_the_chosen_tokens(toy, tables):
    model = toy(tables.random(9, 4, eos_bias=0.5), src_table=torch.randn(9, 9))
    src = torch.tensor([[3, 4, 0], [5, 6, 7]])
    result = greedy_search(model, src)
    assert model.calls[0].tolist() == [BOS, BOS]
    fed = model.last_state.fed  # (B, steps); an output cut at its limit never feeds its last
    for row, tokens in enumerate(result.tokens):
        assert fed[row, : len(tokens) + 1].tolist() == [BOS, *tokens][: fed.size(1)]


def test_batch_gives_the_same_outputs_as_one_sentence_at_a_time(toy, tables):
    model = toy(tables.random(10, 5, eos_bias=0.5), src_table=torch.randn(10, 10))
    src = torch.tensor([[3, 4, 5, 0, 0], [6, 7, 8, 9, 3], [4, 0, 0, 0, 0], [9, 9, 3, 0, 0]])
    batch = greedy_search(model, src)
    assert len({tuple(t) for t in batch.tokens}) > 1  # sentences really differ
    for row in range(src.size(0)):
        alone = greedy_search(model, src[row : row + 1, : int((src[row] != PAD).sum())])
        assert alone.tokens[0] == batch.tokens[row]
        assert alone.scores[0] == pytest.approx(batch.scores[row], abs=1e-6)


def test_length_is_source_length_plus_50_without_eos(toy, tables):
    table = tables.random(8, 6)
    table[:, EOS] = -math.inf  # never ends by itself
    model = toy(table)
    src = torch.tensor([[3, 4, 5, 0, 0, 0, 0], [3, 4, 5, 6, 7, 3, 4]])
    result = greedy_search(model, src)
    assert [len(t) for t in result.tokens] == [53, 57]
    assert len(model.calls) == 57
    assert [len(t) for t in greedy_search(model, src, max_len=10).tokens] == [10, 10]
    short = greedy_search(model, src, max_len_a=2.0, max_len_b=1)
    assert [len(t) for t in short.tokens] == [7, 15]


def test_stops_when_every_sentence_has_finished(toy, tables):
    model = toy(tables.from_probs(6, {BOS: {3: 0.9}, 3: {EOS: 0.9}}))
    src = torch.tensor([[3, 4], [5, 0]])
    result = greedy_search(model, src)
    assert result.tokens == [[3], [3]]
    assert len(model.calls) == 2
    # Without the check it runs to the longest limit, with the same result.
    assert greedy_search(model, src, check_every=0).tokens == [[3], [3]]
    assert len(model.calls) == 52


def test_output_limits_count_non_pad_source_tokens():
    src = torch.tensor([[3, 4, 0, 0], [3, 4, 5, 6], [0, 0, 0, 0]])
    limits, bound = output_limits(src, PAD)
    assert limits.tolist() == [52, 54, 50] and bound == 54
    limits, bound = output_limits(src, PAD, max_len_a=1.5, max_len_b=0, max_len=5)
    assert limits.tolist() == [3, 5, 1] and bound == 5


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_len": 0}, "max_len"),
        ({"max_len_a": -1.0}, "max_len_a"),
        ({"max_len_b": 1.5}, "max_len_b"),
        ({"check_every": -1}, "check_every"),
    ],
)
def test_bad_options_raise_usage_errors_naming_them(toy, tables, kwargs, name):
    model = toy(tables.random(6, 0))
    with pytest.raises(UsageError, match=f"^{name} "):
        greedy_search(model, torch.tensor([[3, 4]]), **kwargs)


def test_src_must_be_a_batch_of_ids(toy, tables):
    with pytest.raises(UsageError, match="src_ids"):
        greedy_search(toy(tables.random(6, 0)), torch.tensor([3, 4]))


def test_transformer_greedy_picks_the_argmax_of_its_own_prefix(tiny_transformer, rescore):
    model = tiny_transformer
    src = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]])
    result = greedy_search(model, src, max_len=8)
    for row, tokens in enumerate(result.tokens):
        score, logp = rescore(model, src[row], tokens, limit=8)
        assert result.scores[row] == pytest.approx(score, abs=1e-9)
        assert logp.argmax(dim=-1)[: len(tokens)].tolist() == tokens
