import json

import pytest

from attnkit.models import EncoderDecoder, TransformerConfig

INVALID = [
    ("d_model", {"d_model": 0}),
    ("d_model", {"d_model": 500}),  # not divisible by 8 heads
    ("num_heads", {"num_heads": -1}),
    ("num_heads", {"num_heads": 2.0}),
    ("d_ff", {"d_ff": 0}),
    ("num_encoder_layers", {"num_encoder_layers": 0}),
    ("num_decoder_layers", {"num_decoder_layers": True}),
    ("dropout", {"dropout": 1.0}),
    ("dropout", {"dropout": "0.1"}),
    ("attention_dropout", {"attention_dropout": -0.1}),
    ("activation", {"activation": "tanh"}),
    ("norm_position", {"norm_position": "middle"}),
    ("positions", {"positions": "spiral"}),
    ("positions", {"positions": "relative+learned"}),
    ("max_relative_position", {"max_relative_position": 0}),
    ("max_len", {"max_len": 0}),
    ("src_vocab_size", {"src_vocab_size": 2}),
    ("tgt_vocab_size", {"tgt_vocab_size": 1, "share_embeddings": "none"}),
    ("share_embeddings", {"share_embeddings": "some"}),
    ("share_embeddings", {"src_vocab_size": 100, "tgt_vocab_size": 200}),
    ("pad_id", {"pad_id": -1}),
    ("pad_id", {"pad_id": 2, "eos_id": 2}),  # pad == bos is allowed: T5 starts from <pad>
    ("bos_id", {"bos_id": "1"}),
    ("eos_id", {"eos_id": 1.5}),
]


@pytest.mark.parametrize(("field", "values"), INVALID)
def test_every_invalid_field_raises_value_error_naming_it(field, values):
    with pytest.raises(ValueError, match=rf"^{field}:"):
        TransformerConfig(**values)


def test_unknown_key_suggests_the_nearest_field():
    with pytest.raises(ValueError, match="did you mean 'd_model'"):
        TransformerConfig.from_dict({"d_modle": 512})


def test_json_round_trip_and_family_check():
    c = TransformerConfig.from_preset("small", norm_position="pre", positions="learned")
    assert TransformerConfig.from_json(c.to_json()) == c
    c = c.replace(positions="sinusoidal+relative", max_relative_position=8)
    assert TransformerConfig.from_json(c.to_json()) == c
    data = json.loads(c.to_json())
    data["family"] = "rnn_seq2seq"
    with pytest.raises(ValueError, match="family"):
        TransformerConfig.from_dict(data)
    with pytest.raises(ValueError, match="preset"):
        TransformerConfig.from_preset("huge")


def _expected_count(c: TransformerConfig) -> int:
    """Parameters written out from §3 (shared 37k vocabulary, tied output)."""
    d, f, n = c.d_model, c.d_ff, c.num_encoder_layers
    attn = 4 * d * d + 4 * d
    ffn = 2 * d * f + f + d
    norm = 2 * d
    return c.src_vocab_size * d + n * (attn + ffn + 2 * norm) + n * (2 * attn + ffn + 3 * norm)


@pytest.mark.parametrize(
    ("preset", "paper_millions", "tolerance"),
    [
        # Table 3 says 213M; our count is 214.2M (+0.6%).
        ("big", 213, 0.01),
        # Table 3 says 65M, but §3 with a 37k shared, tied vocabulary adds up to
        # 63.1M (-2.9%): the paper's figure is rounded from a setup it does not
        # fully describe. We check the exact arithmetic above and stay within 3%.
        ("base", 65, 0.03),
    ],
)
def test_parameter_counts_match_table_3(preset, paper_millions, tolerance):
    c = TransformerConfig.from_preset(preset)
    n = EncoderDecoder(c).num_parameters()
    assert n == _expected_count(c)
    assert abs(n / 1e6 - paper_millions) / paper_millions <= tolerance


@pytest.mark.parametrize(("key_dim", "paper_drop"), [(16, 65 - 58), (32, 65 - 60)])
def test_a_smaller_key_size_removes_table_3_row_b_parameters(key_dim, paper_drop):
    # Row (B) shrinks d_k only: every one of the 18 attention sublayers (6 encoder self,
    # 6 decoder self, 6 cross) loses (64 - d_k) query and key columns per head.
    base = TransformerConfig.from_preset("base")
    small = base.replace(key_dim=key_dim)
    drop = EncoderDecoder(base).num_parameters() - EncoderDecoder(small).num_parameters()
    per_sublayer = 2 * (base.d_model + 1) * base.num_heads * (base.head_dim - key_dim)
    assert drop == 18 * per_sublayer
    assert abs(drop / 1e6 - paper_drop) <= 0.5  # the paper's 65M -> 58M / 60M


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"key_dim": 0}, "key_dim: must be between 1 and"),
        ({"key_dim": 65}, "key_dim: must be between 1 and d_model / num_heads = 64"),
        ({"key_dim": 16, "positions": "rotary"}, "key_dim: a key size of its own needs"),
        ({"key_dim": 16, "attention_score": "dot"}, "key_dim: a key size of its own needs"),
    ],
)
def test_bad_key_sizes_are_refused_by_name(changes, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig.from_preset("base", **changes)
