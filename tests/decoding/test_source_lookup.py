"""Prompt lookup for encoder-decoders: greedy search's outputs, drafted from the source."""

from __future__ import annotations

import pytest
import torch

from attnkit.decoding.common import log_probs
from attnkit.decoding.greedy import greedy_search
from attnkit.decoding.source_lookup import lookup_decode_ids, lookup_greedy
from attnkit.decoding.speculative import SpeculativeStats
from attnkit.decoding.static import StaticCacheStepper
from attnkit.errors import UsageError
from attnkit.models import EncoderDecoder, TransformerConfig

VOCAB = 12  # small: random models repeat themselves and their source, so drafts get accepted


def tiny(**fields) -> EncoderDecoder:
    torch.manual_seed(0)
    config = TransformerConfig.from_preset(
        "small", d_model=32, num_heads=4, d_ff=64, num_encoder_layers=2, num_decoder_layers=2,
        src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, dropout=0.0, **fields,
    )  # fmt: skip
    return EncoderDecoder(config).double().eval()


def sources(model: EncoderDecoder, count: int, seed: int = 1) -> list[torch.Tensor]:
    """Random sources ending in EOS, every other one repeating itself (copy-heavy)."""
    g = torch.Generator().manual_seed(seed)
    low = max(model.pad_id, model.bos_id, model.eos_id) + 1
    out = []
    for i in range(count):
        ids = torch.randint(low, VOCAB, (1, 1 + int(torch.randint(0, 12, (1,), generator=g)))
                            , generator=g)  # fmt: skip
        if i % 2:
            ids = ids.repeat(1, 3)
        out.append(torch.cat([ids, torch.tensor([[model.eos_id]])], dim=1))
    return out


def greedy(model, src, **kw):
    result = greedy_search(model, src, **kw)
    return result.tokens[0], result.scores[0]


@pytest.mark.parametrize("k", [1, 4, 10])
def test_lookup_gives_greedy_search_output_and_score(k):
    model = tiny(max_len=128)
    stats = SpeculativeStats()
    for src in sources(model, 12):
        for max_len_b in (1, 3, 20, 60):
            hyp = lookup_greedy(model, src, num_tokens=k, max_len_b=max_len_b, stats=stats)
            tokens, score = greedy(model, src, max_len_b=max_len_b)
            assert hyp.tokens == tokens
            assert hyp.score == pytest.approx(score, rel=1e-9, abs=1e-9)
    # not vacuous: drafts were made, some accepted, some rejected
    assert stats.accepted > 0 and stats.drafted > stats.accepted
    assert stats.tokens_per_forward > 1.0


def test_the_max_len_cap_holds_as_in_greedy_search():
    model = tiny(max_len=128)
    for src in sources(model, 6, seed=4):
        for cap in (1, 2, 9):
            hyp = lookup_greedy(model, src, num_tokens=6, max_len=cap)
            assert hyp.tokens == greedy(model, src, max_len=cap)[0]
            assert len(hyp.tokens) <= cap


class Scripted:
    """A stepper whose greedy output is ``target`` whatever it is fed (one-hot logits):
    output ``i`` comes after ``i + 1`` fed tokens (BOS first). Its state rolls back."""

    pad_id, bos_id, eos_id = 0, 1, 2

    def __init__(self, target: list[int]) -> None:
        self.target = target

    class State:
        rewindable = True

        def __init__(self) -> None:
            self.length = 0

        def truncate(self, length: int):
            assert length <= self.length
            self.length = length
            return self

        def reorder(self, indices, *, group_size=None):
            return self

    def start(self, src_ids, *, max_steps=None):
        return self.State()

    def _after(self, length: int) -> torch.Tensor:
        logits = torch.zeros(VOCAB)
        logits[self.target[min(length - 1, len(self.target) - 1)]] = 10.0
        return logits

    def step(self, tokens, state):
        state.length += 1
        return self._after(state.length)[None], state

    def verify(self, tokens, state):
        rows = [self._after(state.length + j + 1) for j in range(tokens.size(1))]
        state.length += tokens.size(1)
        return torch.stack(rows)[None], state


def test_a_copying_model_takes_its_source_in_few_passes_and_stops_at_its_eos():
    src = [5, 6, 7, 8, 9, 10, 11, 4, 3, 2]  # ends in EOS (2)
    model = Scripted(src)  # copies the source, EOS included
    stats = SpeculativeStats()
    hyp = lookup_greedy(model, torch.tensor([src]), num_tokens=4, stats=stats)
    assert hyp.tokens == src[:-1] == greedy(model, torch.tensor([src]))[0]
    # BOS's pass gives 5; "5" in the source drafts 6 7 8 9 (all kept, then 10); "9 10"
    # drafts 11 4 3 EOS (all kept: the output ends inside the draft): 3 passes
    assert stats.forwards == 3 and stats.accepted == stats.drafted == 8
    assert hyp.score == pytest.approx(greedy(model, torch.tensor([src]))[1])


def test_a_rejected_draft_is_rolled_back_and_the_output_is_the_models():
    src = [5, 6, 7, 8, 9, 10, 11, 3, 2]
    target = [5, 6, 7, 4, 9, 10, 11, 3, 2]  # departs from the source at its 4th token
    model = Scripted(target)
    stats = SpeculativeStats()
    hyp = lookup_greedy(model, torch.tensor([src]), num_tokens=6, stats=stats)
    assert hyp.tokens == target[:-1] == greedy(model, torch.tensor([src]))[0]
    assert 0 < stats.accepted < stats.drafted and stats.forwards < len(target)


def test_the_static_cache_stepper_gives_the_same_output():
    model = tiny(max_len=96)
    for src in sources(model, 6, seed=7):
        expected = greedy(StaticCacheStepper(model), src, max_len_b=30)[0]
        hyp = lookup_greedy(model, src, num_tokens=5, max_len_b=30,
                            stepper=StaticCacheStepper(model))  # fmt: skip
        assert hyp.tokens == expected


@pytest.mark.parametrize("static", [False, True])
def test_verify_scores_every_fed_token_and_a_rollback_is_exact(static):
    model = tiny(max_len=64)
    src = sources(model, 2)[1]
    steps = StaticCacheStepper(model) if static else model
    state = steps.start(src, max_steps=40)
    _, state = steps.step(torch.tensor([model.bos_id]), state)  # the cache holds BOS
    fed = torch.tensor([[5, 6, 7, 8]])
    every, state = model.verify(fed, state)
    assert every.shape == (1, 4, VOCAB) and state.cache.length == 5
    full = model(src, torch.tensor([[model.bos_id, 5, 6, 7, 8]])).logits[:, 1:]
    torch.testing.assert_close(log_probs(every), log_probs(full), rtol=1e-9, atol=1e-9)
    state = state.truncate(3)  # keep BOS, 5, 6
    logits, state = steps.step(torch.tensor([9]), state)
    fresh = model(src, torch.tensor([[model.bos_id, 5, 6, 9]])).logits[:, -1]
    torch.testing.assert_close(log_probs(logits), log_probs(fresh), rtol=1e-9, atol=1e-9)


def test_blank_sources_give_empty_outputs_and_order_is_kept():
    model = tiny(max_len=64)
    srcs = [s[0].tolist() for s in sources(model, 3)]
    got = lookup_decode_ids(model, [srcs[0], [model.eos_id], srcs[1]], num_tokens=4, max_len=60)
    assert got[1].tokens == [[]]
    assert got[0].tokens[0] == greedy(model, torch.tensor([srcs[0]]), max_len=60)[0]
    assert got[2].tokens[0] == greedy(model, torch.tensor([srcs[1]]), max_len=60)[0]


def test_linear_attention_cannot_roll_back_and_decodes_plainly():
    model = tiny(max_len=64, attention="linear")
    for src in sources(model, 3):
        hyp = lookup_greedy(model, src, num_tokens=4, max_len=60)
        assert hyp.tokens == greedy(model, src, max_len=60)[0]


def test_bad_uses_are_refused():
    model = tiny(max_len=32)
    two = torch.cat(sources(model, 2)[:1] * 2)
    with pytest.raises(UsageError, match="one source"):
        lookup_greedy(model, two)
    with pytest.raises(UsageError, match="num_tokens"):
        lookup_greedy(model, sources(model, 1)[0], num_tokens=0)

    class NoVerify:  # a stepper that cannot take a draft (an RNN seq2seq's place)
        pad_id, bos_id, eos_id = 0, 1, 2

    with pytest.raises(UsageError, match="cannot verify a draft"):
        lookup_decode_ids(NoVerify(), [[model.eos_id]], num_tokens=3)  # type: ignore[arg-type]
