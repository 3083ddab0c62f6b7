"""Sentence embeddings: pooling over real tokens only, any padding, input order kept;
correlations as scipy computes them."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import pearsonr, spearmanr

from attnkit.data.tokenizers import CharTokenizer
from attnkit.evaluation.embeddings import embed_texts, pool_tokens, similarity_scores
from attnkit.models import EncoderOnlyConfig, EncoderOnlyModel


@pytest.mark.parametrize("how", ["mean", "cls", "max"])
def test_pooling_ignores_padding(how):
    hidden = torch.randn(1, 3, 4)
    padded = torch.cat([hidden, torch.full((1, 2, 4), 1e6)], dim=1)  # huge pads must not count
    real = torch.tensor([[True, True, True, False, False]])
    alone = pool_tokens(hidden, torch.ones(1, 3, dtype=torch.bool), how)
    assert torch.allclose(pool_tokens(padded, real, how), alone)
    expected = {"mean": hidden.mean(1), "cls": hidden[:, 0], "max": hidden.amax(1)}[how]
    assert torch.allclose(alone, expected)


def test_unknown_pooling_is_refused():
    with pytest.raises(ValueError, match="pooling"):
        pool_tokens(torch.zeros(1, 2, 3), torch.ones(1, 2, dtype=torch.bool), "sum")


@pytest.fixture
def tiny():
    tok = CharTokenizer.train(["abcdefghijklmnopqrstuvwxyz "])
    config = EncoderOnlyConfig(d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=64,
                               vocab_size=tok.vocab_size, num_labels=0, mask_id=3,
                               pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id)  # fmt: skip
    return EncoderOnlyModel(config).eval(), tok


def test_vectors_do_not_depend_on_batch_or_order(tiny):
    model, tok = tiny
    texts = ["a", "a much longer text here", "mid size", "zz"]
    one = embed_texts(model, tok, texts, batch_size=1, max_len=64).vectors
    many = embed_texts(model, tok, texts, batch_size=4, max_len=64).vectors
    flipped = embed_texts(model, tok, texts[::-1], batch_size=3, max_len=64).vectors
    assert torch.allclose(one, many, atol=1e-5) and torch.allclose(one, flipped.flip(0), atol=1e-5)
    assert torch.allclose(one.norm(dim=-1), torch.ones(4))  # normalised by default
    raw = embed_texts(model, tok, texts, normalize=False, max_len=64).vectors
    assert not torch.allclose(raw.norm(dim=-1), torch.ones(4))


def test_long_texts_are_cut_and_counted(tiny):
    model, tok = tiny
    result = embed_texts(model, tok, ["abc " * 40, "short"], max_len=16)
    assert result.truncated == 1 and result.vectors.shape == (2, 16)


def test_similarity_scores_match_scipy():
    torch.manual_seed(1)
    a, b = torch.randn(20, 8), torch.randn(20, 8)
    gold = torch.rand(20).tolist()
    cos = torch.nn.functional.cosine_similarity(a, b).tolist()
    got = similarity_scores(a, b, gold)
    assert got["pearson"] == pytest.approx(pearsonr(cos, gold).statistic)
    assert got["spearman"] == pytest.approx(spearmanr(cos, gold).statistic)
