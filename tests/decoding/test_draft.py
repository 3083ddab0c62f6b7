"""A draft model as the drafter: greedy gives plain greedy's tokens, its cache rolls back."""

from __future__ import annotations

import copy

import pytest
import torch

from attnkit.decoding.draft import ModelDrafter
from attnkit.decoding.generate import stream
from attnkit.decoding.speculative import SpeculativeStats, speculative_stream
from attnkit.decoding.static import StaticCacheStepper
from attnkit.errors import UsageError
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig

VOCAB = 12


def tiny(seed: int, **fields) -> DecoderOnlyLM:
    torch.manual_seed(seed)
    shape = {"d_model": 32, "num_heads": 4, "num_layers": 2, "d_ff": 64, "max_len": 96}
    config = DecoderOnlyConfig.from_preset("small", vocab_size=VOCAB, **{**shape, **fields})
    return DecoderOnlyLM(config).eval()


def noisy(model: DecoderOnlyLM, scale: float, seed: int) -> DecoderOnlyLM:
    """A draft that mostly agrees with ``model``: its weights plus relative noise."""
    draft = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale * p.std().clamp_min(1e-3))
    return draft


def greedy(model, prompt, n, eos_id=None) -> list[int]:
    return [int(t[0]) for t in stream(model, prompt, n, temperature=0.0, eos_id=eos_id)]


def drafted(model, draft, prompt, n, k=4, stats=None, **kw) -> list[int]:
    drafter = ModelDrafter(draft, stepper=kw.pop("draft_stepper", None))
    tokens = speculative_stream(model, prompt, n, drafter, num_tokens=k, stats=stats, **kw)
    return [int(t[0]) for t in tokens]


def prompts(count: int, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (1, 1 + int(torch.randint(0, 20, (1,), generator=g))),
                          generator=g) for _ in range(count)]  # fmt: skip


@pytest.mark.parametrize("k", [1, 3, 6])
def test_a_different_draft_gives_exactly_the_greedy_tokens(k):
    model = tiny(0)
    draft = noisy(model, 0.5, seed=k)
    stats = SpeculativeStats()
    for prompt in prompts(8):
        for n in (1, 2, 9, 40):
            assert drafted(model, draft, prompt, n, k=k, stats=stats) == greedy(model, prompt, n)
    # not vacuous: drafts were accepted and rejected (the draft's cache rolled back)
    assert 0 < stats.accepted < stats.drafted


def test_the_target_as_its_own_draft_is_always_right():
    model = tiny(0).double()
    stats = SpeculativeStats()
    for prompt in prompts(6, seed=2):
        assert drafted(model, model, prompt, 30, k=5, stats=stats) == greedy(model, prompt, 30)
    assert stats.drafted > 0 and stats.accepted == stats.drafted
    assert stats.tokens_per_forward > 4.0  # 5 drafted + 1 per pass, less the rounds cut short


def test_eos_and_the_context_edges_stop_and_slide_as_greedy_does():
    model, draft = tiny(0, max_len=24), tiny(1, max_len=16, num_layers=1)  # it sees less
    for prompt in prompts(8, seed=3):
        prompt = prompt[:, :20]
        for n in (1, 24 - prompt.size(1), 30):
            if n >= 1:
                assert drafted(model, draft, prompt, n, k=4) == greedy(model, prompt, n)
        plain = greedy(model, prompt, 20)
        eos = plain[len(plain) // 2]
        assert drafted(model, draft, prompt, 20, eos_id=eos) == greedy(model, prompt, 20, eos)


def test_static_cache_steppers_give_the_same_tokens():
    model = tiny(0)
    draft = noisy(model, 0.5, seed=9)
    for prompt in prompts(4, seed=4):
        expected = greedy(model, prompt, 25)
        got = drafted(model, draft, prompt, 25, stepper=StaticCacheStepper(model),
                      draft_stepper=StaticCacheStepper(draft))  # fmt: skip
        assert got == expected


def test_a_draft_without_rollback_is_refused():
    model, draft = tiny(0), tiny(1, attention="linear")
    with pytest.raises(UsageError, match="cannot be rolled back"):
        drafted(model, draft, prompts(1)[0], 10)
