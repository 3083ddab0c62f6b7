"""Text-classifier scoring: macro-F1 against scikit-learn, probabilities independent of
batching and padding, and the metrics of a probability table."""

from __future__ import annotations

import pytest
import torch

from attnkit.data.tokenizers import CharTokenizer
from attnkit.evaluation.text_classification import (
    classification_metrics,
    encode_texts,
    macro_f1,
    predict_probs,
)
from attnkit.models import EncoderOnlyConfig, EncoderOnlyModel


def test_macro_f1_matches_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    gen = torch.Generator().manual_seed(0)
    for k in (2, 3, 5):
        labels = torch.randint(0, k, (200,), generator=gen)
        preds = torch.where(torch.rand(200, generator=gen) < 0.6, labels,
                            torch.randint(0, k, (200,), generator=gen))  # fmt: skip
        expected = metrics.f1_score(labels.numpy(), preds.numpy(), average="macro")
        assert macro_f1(preds, labels, k) == pytest.approx(expected, abs=1e-12)
    # Always the majority label: high accuracy, low macro-F1.
    labels = torch.tensor([0] * 9 + [1])
    out = classification_metrics(torch.tensor([[0.9, 0.1]] * 10), labels)
    assert out["accuracy"] == pytest.approx(0.9)
    assert out["macro_f1"] == pytest.approx((18 / 19 + 0.0) / 2)  # label 1's F1 is 0
    nll = -(9 * torch.tensor(0.9).log() + torch.tensor(0.1).log()) / 10
    assert out["loss"] == pytest.approx(float(nll), rel=1e-5)


def test_probabilities_do_not_depend_on_batching_or_padding():
    tok = CharTokenizer.train(["abcdefgh ijklmnop"])
    config = EncoderOnlyConfig(d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=64,
                               vocab_size=tok.vocab_size + 1, mask_id=tok.vocab_size,
                               num_labels=3, type_vocab_size=2, dropout=0.0)  # fmt: skip
    model = EncoderOnlyModel(config).double()
    torch.nn.init.normal_(model.token_types.weight)
    texts = ["abc", "defgh ijk", "a", "ponm lkji hgf edcba", "bad"]
    pairs = ["x", "gab", "ffff", "h", "deed"]
    encoded = encode_texts(tok, texts, pairs, 64)
    assert encoded.types[0] == [0, 0, 0, 0, 0, 1, 1]
    one = predict_probs(model, encoded, pad_id=tok.pad_id, batch_size=1)
    many = predict_probs(model, encoded, pad_id=tok.pad_id, batch_size=4)
    torch.testing.assert_close(one, many, rtol=0, atol=1e-6)
    torch.testing.assert_close(one.sum(-1), torch.ones(5))
    # Row i is example i: alone it gets the same probabilities.
    alone = predict_probs(model, encode_texts(tok, texts[3:4], pairs[3:4], 64), pad_id=0)
    torch.testing.assert_close(alone[0], one[3], rtol=0, atol=1e-6)
    assert model.training  # scored in eval mode, the mode restored
