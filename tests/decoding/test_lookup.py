"""Prompt-lookup decoding: the same tokens as plain greedy, and an exact cache rollback."""

from __future__ import annotations

import pytest
import torch

from attnkit.decoding.generate import stream
from attnkit.decoding.lookup import LookupStats, NgramIndex, lookup_stream
from attnkit.decoding.static import StaticCacheStepper
from attnkit.errors import UsageError
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig

VOCAB = 12  # small: random models repeat themselves, so drafts get accepted


def tiny(**fields) -> DecoderOnlyLM:
    torch.manual_seed(0)
    config = DecoderOnlyConfig.from_preset(
        "small", vocab_size=VOCAB, d_model=32, num_heads=4, num_layers=2, d_ff=64, **fields
    )
    return DecoderOnlyLM(config).eval()


def greedy(model, prompt, n, eos_id=None, stepper=None) -> list[int]:
    tokens = stream(model, prompt, n, temperature=0.0, eos_id=eos_id, stepper=stepper)
    return [int(t[0]) for t in tokens]


def lookup(model, prompt, n, **kw) -> list[int]:
    return [int(t[0]) for t in lookup_stream(model, prompt, n, **kw)]


def prompts(count: int, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        length = 1 + int(torch.randint(0, 20, (1,), generator=g))
        ids = torch.randint(3, VOCAB, (1, length), generator=g)
        if i % 2:  # copy-heavy: the prompt repeats itself
            ids = ids.repeat(1, 3)
        out.append(ids)
    return out


def test_the_index_drafts_what_followed_the_latest_longest_match():
    ids = [5, 6, 7, 8, 5, 6, 9, 5, 6]
    index = NgramIndex(ids, 3)
    assert index.draft(2) == [9, 5]  # "5 6" last seen before the end at 4..5
    ids.append(7)  # suffix "5 6 7" matches the start
    assert index.draft(3) == [8, 5, 6]
    assert NgramIndex([3, 4], 3).draft(4) == []  # nothing earlier matches
    assert NgramIndex([3, 3], 3).draft(4) == [3]  # the draft stops at the sequence's end


@pytest.mark.parametrize("k", [1, 4, 10])
def test_lookup_yields_exactly_the_greedy_tokens(k):
    model = tiny(max_len=128)
    stats = LookupStats()
    for prompt in prompts(12):
        for n in (1, 2, 7, 40):
            assert lookup(model, prompt, n, num_tokens=k, stats=stats) == greedy(model, prompt, n)
    # the test is not vacuous: drafts were made, some accepted, some rejected
    assert stats.accepted > 0 and stats.drafted > stats.accepted
    assert stats.tokens_per_forward > 1.0


def test_eos_inside_an_accepted_draft_stops_where_greedy_stops():
    model = tiny(max_len=128)
    stopped_inside = 0
    for prompt in prompts(12, seed=3):
        plain = greedy(model, prompt, 60)
        for eos in sorted(set(plain))[:3]:  # a token greedy does produce: it stops there
            expected = greedy(model, prompt, 60, eos_id=eos)
            got = lookup(model, prompt, 60, eos_id=eos, num_tokens=8)
            assert got == expected
            assert got[-1] == eos
            stopped_inside += expected.index(eos) > 0
    assert stopped_inside > 0


def test_the_context_edge_slides_as_plain_greedy_does():
    model = tiny(max_len=24)
    for prompt in prompts(8, seed=5):
        prompt = prompt[:, :24]
        for n in (1, 24 - prompt.size(1), 24 - prompt.size(1) + 1, 30):
            if n >= 1:
                assert lookup(model, prompt, n, num_tokens=6) == greedy(model, prompt, n)
    long = torch.arange(3, 3 + 30)[None] % VOCAB  # longer than the context
    assert lookup(model, long, 5) == greedy(model, long, 5)


def test_the_static_cache_stepper_gives_the_same_tokens():
    model = tiny(max_len=96)
    for prompt in prompts(6, seed=7):
        stepper = StaticCacheStepper(model)
        expected = greedy(model, prompt, 30, stepper=StaticCacheStepper(model))
        assert lookup(model, prompt, 30, num_tokens=5, stepper=stepper) == expected


@pytest.mark.parametrize("static", [False, True])
def test_after_a_rollback_the_next_logits_are_a_fresh_runs(static):
    model = tiny(max_len=64).double()
    ids = torch.randint(3, VOCAB, (1, 12), generator=torch.Generator().manual_seed(2))
    steps = StaticCacheStepper(model) if static else model
    state = steps.start(ids[:, :8], max_steps=40)
    _, state = steps.step(ids[:, 7], state)  # the cache holds 8 positions
    draft = torch.tensor([[3, 4, 5, 6, 7]])
    every, state = model.verify(draft, state)
    assert every.shape == (1, 5, VOCAB) and state.cache.length == 13
    state = state.truncate(10)  # keep 3 and 4 only
    logits, state = steps.step(torch.tensor([9]), state)
    fresh_ids = torch.cat([ids[:, :8], torch.tensor([[3, 4, 9]])], dim=1)
    fresh = model(fresh_ids).logits[:, -1]
    torch.testing.assert_close(logits, fresh, rtol=1e-9, atol=1e-9)
    # the verified logits are the full forward's at those positions
    full = model(torch.cat([ids[:, :8], draft], dim=1)).logits[:, 8:]
    torch.testing.assert_close(every, full, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="truncate"):
        state.truncate(state.cache.length + 1)


def test_bad_uses_are_refused():
    model = tiny(max_len=32)
    with pytest.raises(UsageError, match="one prompt"):
        list(lookup_stream(model, torch.ones(2, 3, dtype=torch.long) + 3, 4))
    with pytest.raises(UsageError, match="num_tokens"):
        list(lookup_stream(model, torch.ones(1, 3, dtype=torch.long) + 3, 4, num_tokens=0))


def test_linear_attention_cannot_roll_back_and_decodes_plainly():
    model = tiny(max_len=64, attention="linear")
    prompt = prompts(2)[1]
    assert lookup(model, prompt, 20) == greedy(model, prompt, 20)
