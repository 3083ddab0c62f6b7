"""test_against_hf: attnkit's EncoderDecoder equals HF MarianMTModel with the same weights."""

import pytest
import torch

from attnkit.models import EncoderDecoder, TransformerConfig

pytest.importorskip("transformers")

from attnkit.interop.hf.marian import to_hf_marian  # noqa: E402

PAD, BOS = 0, 1


def tiny_config(**overrides) -> TransformerConfig:
    sizes = dict(d_model=64, num_heads=4, d_ff=128, num_encoder_layers=2, num_decoder_layers=2)
    sizes.update(src_vocab_size=60, tgt_vocab_size=60, max_len=64)
    return TransformerConfig(**{**sizes, **overrides})


def random_model(cfg: TransformerConfig) -> EncoderDecoder:
    """Eval-mode model with every parameter perturbed.

    Fresh LayerNorms are all ones/zeros and attnkit zeroes linear biases, so
    a mix-up between two norms or two biases would go unnoticed without this.
    """
    model = EncoderDecoder(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def batch(src_vocab: int = 60, tgt_vocab: int = 60) -> tuple[torch.Tensor, torch.Tensor]:
    """Source and target with right padding in some rows (and one unpadded row)."""
    src = torch.randint(3, src_vocab, (3, 9))
    tgt = torch.randint(3, tgt_vocab, (3, 7))
    tgt[:, 0] = BOS
    src[1, 6:] = PAD
    src[2, 3:] = PAD
    tgt[1, 4:] = PAD
    tgt[2, 5:] = PAD
    return src, tgt


def max_diff_at_real_positions(model, hf, src, tgt) -> float:
    with torch.no_grad():
        ours = model(src, tgt).logits
        theirs = hf(
            input_ids=src,
            attention_mask=src != PAD,
            decoder_input_ids=tgt,
            decoder_attention_mask=tgt != PAD,
        ).logits
    assert theirs.shape == ours.shape
    real = tgt != PAD
    return (ours - theirs)[real].abs().max().item()


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("permute_dims", [True, False])
def test_against_hf_marian(attn_implementation, permute_dims):
    model = random_model(tiny_config())
    hf = to_hf_marian(
        model, permute_dims=permute_dims, attn_implementation=attn_implementation
    ).eval()
    assert hf.config._attn_implementation == attn_implementation
    diff = max_diff_at_real_positions(model, hf, *batch())
    assert diff <= 1e-5, diff


@pytest.mark.parametrize(
    "share_embeddings,src_vocab,tgt_vocab", [("all", 60, 60), ("decoder", 60, 50), ("none", 60, 50)]
)
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_against_hf_marian_tying_and_activation(share_embeddings, src_vocab, tgt_vocab, activation):
    cfg = tiny_config(
        share_embeddings=share_embeddings,
        src_vocab_size=src_vocab,
        tgt_vocab_size=tgt_vocab,
        activation=activation,
    )
    model = random_model(cfg)
    hf = to_hf_marian(model).eval()
    diff = max_diff_at_real_positions(model, hf, *batch(src_vocab, tgt_vocab))
    assert diff <= 1e-5, diff
    # Tying carried over: HF trains the same number of matrices as we do.
    trainable = sum(p.numel() for p in hf.parameters() if p.requires_grad)
    assert trainable == model.num_parameters()


def test_hf_config_fields():
    cfg = tiny_config(pad_id=3, bos_id=4, eos_id=5, max_len=40)
    hf = to_hf_marian(EncoderDecoder(cfg))
    c = hf.config
    assert (c.pad_token_id, c.bos_token_id, c.eos_token_id) == (3, 4, 5)
    assert c.decoder_start_token_id == 4
    assert c.max_position_embeddings == 40
    assert c.scale_embedding
    assert torch.count_nonzero(hf.final_logits_bias) == 0


def test_saved_and_reloaded_hf_model_still_matches(tmp_path):
    """Permuted dims keep HF's own sinusoid table, so a save/load round trip keeps parity."""
    from transformers import MarianMTModel

    model = random_model(tiny_config())
    to_hf_marian(model).save_pretrained(tmp_path)
    reloaded = MarianMTModel.from_pretrained(tmp_path).eval()
    assert max_diff_at_real_positions(model, reloaded, *batch()) <= 1e-5


def test_overwritten_table_is_lost_on_reload(tmp_path):
    """The documented pitfall of permute_dims=False: HF recomputes its table on load."""
    from transformers import MarianMTModel

    model = random_model(tiny_config())
    to_hf_marian(model, permute_dims=False).save_pretrained(tmp_path)
    reloaded = MarianMTModel.from_pretrained(tmp_path).eval()
    assert max_diff_at_real_positions(model, reloaded, *batch()) > 1e-3


@pytest.mark.parametrize("field,value", [("norm_position", "pre"), ("positions", "learned")])
def test_unsupported_configs_raise_naming_the_field(field, value):
    model = EncoderDecoder(tiny_config(**{field: value}))
    with pytest.raises(ValueError, match=field):
        to_hf_marian(model)
