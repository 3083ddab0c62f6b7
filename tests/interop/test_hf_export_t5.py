"""attnkit T5 -> transformers' T5ForConditionalGeneration: equal logits, and back bit for bit."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.checkpoints.loading import load_model
from attnkit.errors import ConfigError
from attnkit.interop.hf.importer import import_hf
from attnkit.interop.hf.t5 import to_hf_t5
from attnkit.models import EncoderDecoder, TransformerConfig

pytest.importorskip("transformers")

V = 30
SIZES = dict(src_vocab_size=V, tgt_vocab_size=V, d_model=32, num_heads=4, d_ff=48,
             num_encoder_layers=2, num_decoder_layers=3, dropout=0.0, relative_buckets=8,
             relative_max_distance=16)  # fmt: skip
VARIANTS = {
    "original": dict(activation="relu", share_embeddings="all", scale_output=True),
    "v1.1": dict(activation="gated_gelu", share_embeddings="inputs", scale_output=False),
}


def _model(variant: str) -> EncoderDecoder:
    torch.manual_seed(0)
    config = TransformerConfig.from_preset("t5", **SIZES, **VARIANTS[variant])
    model = EncoderDecoder(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_equal_after_export(variant):
    # float64: HF's T5LayerNorm still takes its variance in float32 (~1e-7 relative)
    model = _model(variant).double()
    hf = to_hf_t5(model).eval()
    assert next(hf.parameters()).dtype == torch.float64
    src, tgt = torch.randint(4, V, (2, 8)), torch.randint(4, V, (2, 6))
    src[1, 5:] = 0
    tgt[:, 0] = 1  # attnkit's BOS: the exported decoder_start_token_id
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=src != 0, decoder_input_ids=tgt).logits
        diff = (model(src, tgt).logits - theirs).abs().max().item()
    assert diff <= 1e-5, diff


@pytest.mark.parametrize("variant", VARIANTS)
def test_export_then_import_is_bit_exact(variant, tmp_path):
    from tokenizers import Tokenizer, models

    model = _model(variant)
    to_hf_t5(model).save_pretrained(tmp_path / "hf")
    vocab = {f"w{i}": i for i in range(V)}
    (tmp_path / "hf" / "tokenizer.json").write_text(
        Tokenizer(models.WordLevel(vocab, unk_token="w3")).to_str()
    )
    json.loads((tmp_path / "hf" / "config.json").read_text())  # written by transformers
    import_hf(tmp_path / "hf", tmp_path / "run")
    back = load_model(tmp_path / "run", "cpu")
    assert back.config.to_dict() == {**model.config.to_dict(), "max_len": 512}
    ours, theirs = model.state_dict(), back.model.state_dict()
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key


def test_a_model_t5_cannot_express_is_refused_naming_the_field():
    config = TransformerConfig.from_preset("t5", **SIZES, norm="layernorm")
    with pytest.raises(ConfigError, match="^norm: T5 needs"):
        to_hf_t5(EncoderDecoder(config))
