import pytest
import torch

from attnkit.decoding import beam_search, greedy_search
from attnkit.decoding.constraints import MinLength
from attnkit.errors import UsageError
from attnkit.models import EncoderDecoder, TransformerConfig


class AlwaysEOS:
    """A stepper that prefers EOS at every step, then token 5."""

    pad_id, bos_id, eos_id = 0, 1, 2

    def start(self, src_ids, *, max_steps=None):
        return _State()

    def step(self, tokens, state):
        logits = torch.full((tokens.size(0), 8), -5.0)
        logits[:, 2] = 0.0
        logits[:, 5] = -1.0
        return logits, state


class _State:
    def reorder(self, indices, *, group_size=None):
        return self


@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_min_length_forces_exactly_that_many_tokens(search):
    src = torch.ones(3, 4, dtype=torch.long)
    assert search(AlwaysEOS(), src).tokens == [[], [], []]
    out = search(MinLength(AlwaysEOS(), 7), src, max_len=20)
    assert out.tokens == [[5] * 7] * 3


def test_min_length_keeps_scores_of_a_real_model_when_eos_comes_late():
    cfg = TransformerConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, src_vocab_size=30, tgt_vocab_size=30, dropout=0.0
    )
    model = EncoderDecoder(cfg).eval()
    src = torch.randint(3, 30, (2, 5))
    forced = greedy_search(MinLength(model, 12), src, max_len=12)
    assert [len(t) for t in forced.tokens] == [12, 12]
    assert all(2 not in t for t in forced.tokens)


def test_rejects_negative_min_len():
    with pytest.raises(UsageError, match="min_len"):
        MinLength(AlwaysEOS(), -1)
