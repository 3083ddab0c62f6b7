"""Perplexity: exp of the mean NLL, inf instead of overflow."""

from __future__ import annotations

import math

import pytest

from attnkit.errors import UsageError
from attnkit.evaluation.perplexity import perplexity


def test_values() -> None:
    assert perplexity(0.0, 5) == 1.0
    assert perplexity(10 * math.log(4), 10) == pytest.approx(4.0)


def test_overflow_is_inf() -> None:
    assert perplexity(1e6, 10) == math.inf


def test_no_tokens() -> None:
    with pytest.raises(UsageError, match="total_tokens"):
        perplexity(1.0, 0)


def bert_like_tokenizer():
    """A BERT-shaped vocabulary: [PAD] 0, ordinary ids 1-4, [UNK] 5, [CLS] 6, [SEP] 7,
    [MASK] 8, so id 3 is an ordinary word here (attnkit's own tokenizers use it for unk)."""
    tokenizers = pytest.importorskip("tokenizers")
    from attnkit.data.pretrained_tokenizer import PretrainedTokenizer

    words = ["[PAD]", "a", "b", "c", "d", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    hf = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]")
    )
    hf.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return PretrainedTokenizer(hf, pad_id=0, bos_id=6, eos_id=7, unk_id=5, mask_id=8)


def test_mlm_special_ids_are_the_tokenizers_own() -> None:
    from attnkit.data.tokenizers import CharTokenizer
    from attnkit.evaluation.perplexity import mlm_special_ids

    assert mlm_special_ids(bert_like_tokenizer()) == [0, 5, 6, 7, 8]
    assert mlm_special_ids(CharTokenizer(["a"])) == [0, 1, 2, 3]


def test_a_masked_lm_scores_the_tokens_its_tokenizer_calls_ordinary() -> None:
    import torch

    from attnkit.evaluation.perplexity import mlm_special_ids, text_perplexity
    from attnkit.models import EncoderOnlyConfig, EncoderOnlyModel

    tok = bert_like_tokenizer()
    config = EncoderOnlyConfig.from_preset(
        "small", d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8, vocab_size=9,
        pad_id=0, bos_id=6, eos_id=7, mask_id=8, num_labels=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = EncoderOnlyModel(config)
    special = mlm_special_ids(tok)

    def scored(token: int) -> float:
        ids = torch.full((200,), token, dtype=torch.long)
        out = text_perplexity(model, ids, masked=True, special_ids=special, mask_prob=0.5)
        return out["tokens"]

    assert scored(3) > 0  # an ordinary word of this vocabulary is predicted
    assert scored(tok.encode("zzz")[0]) == 0  # its unknown token ([UNK], 5) never is
    with pytest.raises(UsageError, match="special_ids"):
        text_perplexity(model, torch.zeros(20, dtype=torch.long), masked=True)
