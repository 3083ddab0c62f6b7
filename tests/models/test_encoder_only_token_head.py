"""The token-level head (``label_level="token"``): scores for every token, the same
whatever padding follows, no sequence head beside it; config round trip."""

from __future__ import annotations

import pytest
import torch

from attnkit.errors import ConfigError
from attnkit.models import EncoderOnlyConfig, EncoderOnlyModel
from attnkit.models.registry import config_from_dict


def _config(**kw):
    base = dict(d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=32, vocab_size=50,
                num_labels=5, label_level="token", mask_id=49)  # fmt: skip
    return EncoderOnlyConfig(**{**base, **kw})


def test_scores_every_token_and_ignores_padding():
    model = EncoderOnlyModel(_config()).eval()
    ids = torch.randint(4, 49, (1, 6))
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    out = model(ids, mlm=False)
    assert out.token_logits is not None and out.token_logits.shape == (1, 6, 5)
    assert out.class_logits is None
    again = model(padded, mlm=False).token_logits
    assert torch.allclose(again[:, :6], out.token_logits, atol=1e-5)
    assert model(ids, mlm=False, classify=False).token_logits is None


def test_no_sequence_head_unless_a_pretrained_pooler_is_kept():
    names = {n for n, _ in EncoderOnlyModel(_config()).named_parameters()}
    assert not any(n.startswith("classifier.") for n in names)
    assert {"token_classifier.classifier.weight", "token_classifier.classifier.bias"} <= names
    kept = {n for n, _ in EncoderOnlyModel(_config(pooler=True)).named_parameters()}
    assert "classifier.pooler.weight" in kept and "classifier.classifier.weight" not in kept


def test_config_checks_and_round_trip():
    with pytest.raises(ConfigError, match="label_level: token: needs num_labels >= 1"):
        _config(num_labels=0)
    with pytest.raises(ConfigError, match="label_level"):
        _config(label_level="word")
    config = _config()
    assert config_from_dict(config.to_dict()) == config
    assert (
        EncoderOnlyConfig.from_dict({**config.to_dict(), "label_level": "sequence"}).label_level
        == "sequence"
    )
