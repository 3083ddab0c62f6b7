"""Speculative sampling keeps plain sampling's distribution, for both drafters.

On tiny random models with a small vocabulary, the joint distribution of the
first three tokens is computed exactly (by enumeration, from full forwards and
the same temperature/top-k/top-p filter that plain sampling uses) and compared
with the empirical one of a few thousand seeded speculative runs. Drafts are
at most two tokens long here and every prompt token recurs, so each run
verifies a draft for tokens 2 and 3: acceptances, rejections (the residual
draw) and the extra token after a fully accepted draft all take part.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from attnkit.decoding.draft import ModelDrafter
from attnkit.decoding.lookup import NgramDrafter
from attnkit.decoding.protocol import Draft
from attnkit.decoding.speculative import (
    Sampling,
    SpeculativeStats,
    accept,
    speculative_stream,
)
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig

VOCAB = 12
PROMPT = torch.tensor([list(range(3, VOCAB)) * 2])  # every ordinary token recurs
FIRST = 3  # tokens compared
RUNS = 1000
BOUND = 0.1  # total variation; a correct sampler gives ~0.03-0.05 at this many runs, the
# lying drafter below ~0.25


def tiny(seed: int) -> DecoderOnlyLM:
    torch.manual_seed(seed)
    config = DecoderOnlyConfig.from_preset(
        "small", vocab_size=VOCAB, d_model=32, num_heads=4, num_layers=2, d_ff=64, max_len=64
    )
    return DecoderOnlyLM(config).eval()


def exact(model: DecoderOnlyLM, how: Sampling) -> dict[tuple[int, ...], float]:
    """P(first ``FIRST`` tokens), enumerated over the filtered distributions' supports."""
    out: dict[tuple[int, ...], float] = {}

    def walk(prefix: tuple[int, ...], mass: float) -> None:
        if len(prefix) == FIRST:
            out[prefix] = mass
            return
        ids = torch.cat([PROMPT, torch.tensor([prefix], dtype=torch.long)], dim=1)
        with torch.no_grad():
            p = how.probs(model(ids).logits[:, -1])[0]
        for t in (p > 0).nonzero().flatten().tolist():
            walk((*prefix, t), mass * float(p[t]))

    walk((), 1.0)
    return out


def empirical(model, make_drafter, how: Sampling, stats: SpeculativeStats) -> Counter:
    counts: Counter = Counter()
    for run in range(RUNS):
        g = torch.Generator().manual_seed(run)
        sampling = Sampling(how.temperature, how.top_k, how.top_p, generator=g)
        drafter = make_drafter(sampling)
        tokens = speculative_stream(model, PROMPT, FIRST + 1, drafter, num_tokens=2,
                                    sampling=sampling, stats=stats)  # fmt: skip
        counts[tuple(int(t[0]) for t in list(tokens)[:FIRST])] += 1
    return counts


def total_variation(p: dict[tuple[int, ...], float], counts: Counter) -> float:
    keys = set(p) | set(counts)
    return 0.5 * sum(abs(p.get(k, 0.0) - counts[k] / RUNS) for k in keys)


class LyingDrafter(NgramDrafter):
    """A lookup that claims its tokens were drawn uniformly: the rule then accepts too often."""

    def propose(self, ids: list[int], k: int) -> Draft:
        draft = super().propose(ids, k)
        uniform = torch.full((len(draft.tokens), VOCAB), 1.0 / VOCAB)
        return Draft(draft.tokens, uniform if draft.tokens else None)


SETTINGS = [Sampling(1.0, top_k=3), Sampling(0.8, top_p=0.8)]


@pytest.mark.parametrize("how", SETTINGS, ids=["top_k", "top_p"])
def test_prompt_lookup_sampling_keeps_the_distribution(how):
    model = tiny(0)
    stats = SpeculativeStats()
    counts = empirical(model, lambda s: NgramDrafter(), how, stats)
    assert total_variation(exact(model, how), counts) < BOUND
    # drafts were verified, some accepted and some rejected
    assert stats.rounds >= RUNS and 0 < stats.accepted < stats.drafted


def test_a_draft_model_sampling_keeps_the_distribution():
    model, draft = tiny(0), tiny(1)
    how = SETTINGS[0]
    stats = SpeculativeStats()
    counts = empirical(model, lambda s: ModelDrafter(draft, sampling=s), how, stats)
    assert total_variation(exact(model, how), counts) < BOUND
    assert stats.rounds >= RUNS and 0 < stats.accepted < stats.drafted


def test_the_check_catches_a_wrong_acceptance():
    """The same check fails when the rule is fed a wrong q: the test can fail."""
    model = tiny(0)
    how = SETTINGS[0]
    counts = empirical(model, lambda s: LyingDrafter(), how, SpeculativeStats())
    assert total_variation(exact(model, how), counts) > BOUND


def test_the_rule_on_known_distributions():
    """Rejection draws from norm(max(0, p - q)); a one-hot q removes the draft token."""
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]))
    how = Sampling(1.0, generator=torch.Generator().manual_seed(0))
    n_runs = 4000
    # q one-hot at token 0: accepted with p(0) = 0.5; else token 1 or 2 as 0.3 : 0.2
    outcomes = Counter(accept(logits, Draft([0]), how) for _ in range(n_runs))
    accepted = sum(c for (n, _), c in outcomes.items() if n == 1)
    assert abs(accepted / n_runs - 0.5) < 0.03
    assert outcomes[(0, 0)] == 0  # the rejected token is never the replacement
    assert abs(outcomes[(0, 1)] / (outcomes[(0, 1)] + outcomes[(0, 2)]) - 0.6) < 0.04
    # q = (0.2, 0.6, 0.2) drew token 1: accepted with 0.3 / 0.6; else from (0.3, 0, 0) + ...
    q = torch.tensor([[0.2, 0.6, 0.2]])
    outcomes = Counter(accept(logits, Draft([1], q), how) for _ in range(n_runs))
    accepted = sum(c for (n, _), c in outcomes.items() if n == 1)
    assert abs(accepted / n_runs - 0.5) < 0.03
    assert set(t for n, t in outcomes if n == 0) == {0}  # max(0, p - q) = (0.3, 0, 0)
    # greedy: the argmax prefix, then the argmax
    assert accept(logits, Draft([0]), Sampling()) == (1, 2)
    assert accept(logits, Draft([1]), Sampling()) == (0, 0)


def test_exact_enumeration_sums_to_one():
    model = tiny(0)
    for how in SETTINGS:
        assert sum(exact(model, how).values()) == pytest.approx(1.0, abs=1e-5)
    assert len(exact(model, SETTINGS[0])) == 27  # top-k 3, three tokens
