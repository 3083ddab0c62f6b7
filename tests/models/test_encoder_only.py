"""Encoder-only model: padding invariance, the tied MLM head, the classification head."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.errors import ConfigError
from attnkit.models.encoder_only import EncoderOnlyModel
from attnkit.models.lm_config import EncoderOnlyConfig

V, MASK, PAD = 21, 20, 0


def tiny(**overrides) -> EncoderOnlyModel:
    fields = {"d_model": 32, "num_heads": 4, "d_ff": 64, "num_layers": 2, "vocab_size": V,
              "mask_id": MASK, "max_len": 16, "num_labels": 3, **overrides}  # fmt: skip
    return EncoderOnlyModel(EncoderOnlyConfig.from_preset("small", **fields)).double().eval()


def ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, MASK, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("norm_position", "pooling", "positions"),
    [
        ("post", "first", "learned"),
        ("pre", "mean", "sinusoidal"),
        ("post", "mean", "learned"),
        ("pre", "mean", "relative"),
        ("post", "first", "learned+relative"),
    ],
)
def test_padding_never_changes_the_outputs_of_real_tokens(norm_position, pooling, positions):
    model = tiny(norm_position=norm_position, pooling=pooling, positions=positions)
    short, other = ids(1, 5), ids(1, 9, seed=1)
    batch = torch.cat([F.pad(short, (0, 4), value=PAD), other])
    with torch.no_grad():
        alone, padded = model(short), model(batch)
    torch.testing.assert_close(padded.hidden[:1, :5], alone.hidden, rtol=0, atol=1e-10)
    torch.testing.assert_close(padded.mlm_logits[:1, :5], alone.mlm_logits, rtol=0, atol=1e-10)
    torch.testing.assert_close(padded.class_logits[:1], alone.class_logits, rtol=0, atol=1e-10)
    with torch.no_grad():
        weights = model(batch, need_weights=True).attentions
    assert all(torch.all(w[0, :, :, 5:] == 0) for w in weights)  # nobody attends to padding


def test_mlm_head_is_tied_to_the_token_embedding():
    model = tiny()
    emb = model.embed.tokens.weight
    assert model.mlm_head.output_proj.weight is emb
    assert model.num_parameters() == sum(p.numel() for p in set(model.parameters()))
    x = ids(2, 6)
    out = model(x, classify=False)
    assert out.mlm_logits.shape == (2, 6, V) and out.class_logits is None
    h = model.mlm_head.norm(model.mlm_head.activation(model.mlm_head.dense(out.hidden)))
    torch.testing.assert_close(out.mlm_logits, h @ emb.T + model.mlm_head.bias)
    F.cross_entropy(out.mlm_logits.flatten(0, 1), x.flatten()).backward()
    assert emb.grad is not None and emb.grad.abs().sum() > 0


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_classification_head_shape_and_values(pooling):
    model = tiny(pooling=pooling)
    x = torch.cat([F.pad(ids(1, 4), (0, 3), value=PAD), ids(1, 7, seed=2)])
    with torch.no_grad():
        out = model(x, mlm=False)
    assert out.class_logits.shape == (2, 3) and out.mlm_logits is None
    assert torch.isfinite(out.class_logits).all()
    if pooling == "first":
        pooled = out.hidden[:, 0]
    else:
        pooled = torch.stack([out.hidden[0, :4].mean(0), out.hidden[1].mean(0)])
    head = model.classifier
    expected = head.classifier(torch.tanh(head.pooler(pooled)))
    torch.testing.assert_close(out.class_logits, expected)
    assert not torch.allclose(out.class_logits[0], out.class_logits[1])


def test_no_classifier_with_zero_labels():
    model = tiny(num_labels=0)
    assert model.classifier is None
    assert model(ids(1, 3)).class_logits is None


def test_config_round_trip_and_validation():
    c = EncoderOnlyConfig.from_preset("small", vocab_size=V, mask_id=MASK)
    assert EncoderOnlyConfig.from_json(c.to_json()) == c
    assert c.to_dict()["family"] == "encoder_only"
    assert c.norm_position == "post"  # BERT is post-LN
    with pytest.raises(ConfigError, match="^pad_id:"):
        EncoderOnlyConfig(mask_id=0)
    with pytest.raises(ConfigError, match="^vocab_size:"):
        EncoderOnlyConfig(vocab_size=100, mask_id=100)
    with pytest.raises(ConfigError, match="^pooling:"):
        EncoderOnlyConfig(pooling="max")
    with pytest.raises(ConfigError, match="^num_labels:"):
        EncoderOnlyConfig(num_labels=-1)
    with pytest.raises(ConfigError, match="did you mean 'pooling'"):
        EncoderOnlyConfig.from_dict({"poling": "mean"})
    with pytest.raises(ConfigError, match="family"):
        EncoderOnlyConfig.from_dict({"family": "decoder_only"})


# -- token-type (segment) embeddings and label names --------------------------------------


def test_segment_embeddings_are_added_before_the_norm_and_default_to_type_zero():
    model = tiny(type_vocab_size=2, embedding_norm=True)
    torch.nn.init.normal_(model.token_types.weight)
    x = ids(2, 7)
    types = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0]])
    with torch.no_grad():
        default, zeros, pair = (
            model(x),
            model(x, token_types=torch.zeros_like(x)),
            model(x, token_types=types),
        )
        e = model.embed
        expected = e.norm(e.tokens(x) + e.positions(7) + model.token_types(types))
        hidden = model.encoder(expected, mask=None).hidden
    torch.testing.assert_close(default.hidden, zeros.hidden, rtol=0, atol=0)
    torch.testing.assert_close(pair.hidden, hidden, rtol=0, atol=1e-12)
    assert not torch.allclose(pair.hidden[0], default.hidden[0])  # the second segment differs
    torch.testing.assert_close(pair.hidden[1], default.hidden[1], rtol=0, atol=0)


def test_fresh_segment_embeddings_start_at_zero_and_learn():
    model = tiny(type_vocab_size=2)
    assert torch.count_nonzero(model.token_types.weight) == 0
    x = ids(1, 6)
    types = torch.tensor([[0, 0, 0, 1, 1, 1]])
    torch.testing.assert_close(model(x, token_types=types).hidden, model(x).hidden)
    model.train()
    model(x, token_types=types, mlm=False).class_logits.sum().backward()
    assert model.token_types.weight.grad.abs().sum() > 0


def test_a_model_without_segments_refuses_a_second_segment():
    model = tiny()
    assert model.token_types is None and "token_types.weight" not in model.state_dict()
    x = ids(1, 4)
    model(x, token_types=torch.zeros_like(x))  # all type 0: fine
    with pytest.raises(ValueError, match="type_vocab_size=0"):
        model(x, token_types=torch.tensor([[0, 0, 1, 1]]))


def test_label_names_must_match_num_labels_and_old_configs_load():
    config = EncoderOnlyConfig(num_labels=2, label_names=("neg", "pos"))
    assert EncoderOnlyConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="label_names: 1 names for num_labels=2"):
        EncoderOnlyConfig(num_labels=2, label_names=("neg",))
    old = config.to_dict()
    del old["label_names"], old["type_vocab_size"]  # a checkpoint written before the fields
    assert EncoderOnlyConfig.from_dict(old).type_vocab_size == 0
