"""T5 as options of the encoder-decoder: relative bias per stack, RMSNorm, gated GELU,
unscaled attention, the tied-output rescale; decoding with the decoder's bias."""

import pytest
import torch
import torch.nn.functional as F

from attnkit.checkpoints import save_checkpoint
from attnkit.checkpoints.loading import load_model
from attnkit.data.tokenizers import CharTokenizer
from attnkit.decoding.static import StaticCacheStepper
from attnkit.errors import ConfigError
from attnkit.models import EncoderDecoder, TransformerConfig
from attnkit.positions.t5_relative import T5RelativeBias

V = 40
SMALL = dict(src_vocab_size=V, tgt_vocab_size=V, d_model=32, num_heads=4, d_ff=48,
             num_encoder_layers=2, num_decoder_layers=3, dropout=0.0, max_len=64,
             relative_buckets=8, relative_max_distance=16)  # fmt: skip


def _config(**overrides) -> TransformerConfig:
    return TransformerConfig.from_preset("t5_small_cpu", **{**SMALL, **overrides})


def _model(seed: int = 0, **overrides) -> EncoderDecoder:
    torch.manual_seed(seed)
    model = EncoderDecoder(_config(**overrides)).double().eval()
    with torch.no_grad():  # a bias table far from its init, so positions matter
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _ids(b: int, t: int, *, bos: bool = False) -> torch.Tensor:
    ids = torch.randint(4, V, (b, t))
    if bos:
        ids[:, 0] = 1
    return ids


def test_the_preset_is_t5s_options():
    c = _config()
    assert (c.positions, c.norm, c.norm_position, c.activation, c.attention_score) == (
        "t5_relative", "rmsnorm", "pre", "gated_gelu", "dot",
    )  # fmt: skip
    assert c.absolute_positions == "none" and not c.relative_positions
    assert not c.bias and not c.scale_embeddings and c.scale_output
    m = EncoderDecoder(c)
    assert not any(n.endswith(".bias") for n, _ in m.named_parameters())
    assert type(m.encoder.final_norm).__name__ == "RMSNorm"


def test_one_bias_table_per_stack_bidirectional_in_the_encoder_causal_in_the_decoder():
    m = _model()
    enc = {id(layer.self_attn.position_bias) for layer in m.encoder.layers}
    dec = {id(layer.self_attn.position_bias) for layer in m.decoder.layers}
    assert len(enc) == 1 and len(dec) == 1 and enc != dec
    enc_bias = m.encoder.layers[0].self_attn.position_bias
    dec_bias = m.decoder.layers[0].self_attn.position_bias
    assert isinstance(enc_bias, T5RelativeBias) and enc_bias.bidirectional
    assert isinstance(dec_bias, T5RelativeBias) and not dec_bias.bidirectional
    assert enc_bias.num_buckets == 8 and enc_bias.max_distance == 16
    # Stored once, whatever the layer count.
    tables = [p for n, p in m.named_parameters() if "position_bias" in n]
    assert len(tables) == 2


def test_the_encoder_sees_positions_through_the_bias_only():
    m = _model()
    src, tgt = _ids(1, 6), _ids(1, 4, bos=True)
    base = m(src, tgt).logits
    with torch.no_grad():
        m.encoder.layers[0].self_attn.position_bias.table.weight.zero_()
    # No positions at all: a permuted source gives the same (order-free) logits.
    perm = torch.tensor([3, 1, 5, 0, 2, 4])
    torch.testing.assert_close(m(src[:, perm], tgt).logits, m(src, tgt).logits)
    assert not torch.allclose(m(src, tgt).logits, base)


def test_future_target_tokens_never_change_earlier_logits():
    m = _model()
    src, tgt = _ids(2, 7), _ids(2, 6, bos=True)
    changed = tgt.clone()
    changed[:, 4:] = _ids(2, 2)
    a, b = m(src, tgt).logits, m(src, changed).logits
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


@pytest.mark.parametrize("overrides", [{}, {"activation": "relu", "share_embeddings": "inputs",
                                            "scale_output": False}])  # fmt: skip
def test_cached_decoding_with_the_relative_bias_equals_the_full_forward(overrides):
    m = _model(**overrides)
    src, tgt = _ids(3, 6), _ids(3, 9, bos=True)
    src[1, 4:] = 0  # a padded source row
    full = m(src, tgt).logits
    state = m.start(src, max_steps=2)  # small capacity: the cache grows
    steps = []
    for t in range(tgt.size(1)):
        logits, state = m.step(tgt[:, t], state)
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), full)
    state = m.start(src)  # a prefill of several tokens, then single steps
    last, state = m.step(tgt[:, :5], state)
    torch.testing.assert_close(last, full[:, 4])
    nxt, _ = m.step(tgt[:, 5], state)
    torch.testing.assert_close(nxt, full[:, 5])


def test_static_cache_decoding_equals_the_full_forward():
    m = _model()
    assert m.cache_layout() is not None  # the bias needs only the query positions
    src, tgt = _ids(2, 6), _ids(2, 7, bos=True)
    full = m(src, tgt).logits
    stepper = StaticCacheStepper(m)
    state = stepper.start(src, max_steps=12)  # keys past the filled ones are masked
    assert type(state.cache).__name__ == "StaticKVCache"
    for t in range(tgt.size(1)):
        logits, state = stepper.step(tgt[:, t], state)
        torch.testing.assert_close(logits, full[:, t])


def test_gated_gelu_is_geglu_with_the_tanh_gelu():
    ffn = _model().encoder.layers[0].ffn
    x = torch.randn(2, 3, 32, dtype=torch.float64)
    gate = F.gelu(ffn.gate_proj(x), approximate="tanh")
    torch.testing.assert_close(ffn(x), ffn.down_proj(gate * ffn.up_proj(x)))


def test_the_unscaled_dot_product_starts_as_the_scaled_one():
    """T5 folds 1/sqrt(d_k) into the queries' init: same seed, same function at init."""
    torch.manual_seed(0)
    dot = EncoderDecoder(_config()).double().eval()
    torch.manual_seed(0)
    scaled = EncoderDecoder(_config(attention_score="scaled_dot")).double().eval()
    src, tgt = _ids(2, 5), _ids(2, 4, bos=True)
    torch.testing.assert_close(dot(src, tgt).logits, scaled(src, tgt).logits)
    q = dot.encoder.layers[0].self_attn.qkv_proj.weight[:32]
    q_scaled = scaled.encoder.layers[0].self_attn.qkv_proj.weight[:32]
    torch.testing.assert_close(q, q_scaled * 8**-0.5)


def test_the_tied_output_is_rescaled_by_d_model_to_the_minus_half():
    m = _model()
    src, tgt = _ids(2, 5), _ids(2, 4, bos=True)
    out = m(src, tgt)
    torch.testing.assert_close(out.logits, out.hidden @ m.logits_weight().T)
    plain = _model(scale_output=False)
    plain.load_state_dict(m.state_dict())  # the same weights (T5's init differs: below)
    torch.testing.assert_close(out.logits, plain(src, tgt).logits * 32**-0.5)


@pytest.mark.parametrize("d_model", [32, 256])
def test_t5s_init_gives_the_first_logits_unit_scale(d_model):
    """T5 draws its shared embeddings from N(0, 1), so after the d_model**-0.5 rescale the
    first logits have unit scale; N(0, D**-0.5) left them D**0.5 times too small."""
    torch.manual_seed(0)
    m = EncoderDecoder(_config(d_model=d_model, d_ff=2 * d_model)).eval()
    assert 0.9 < m.src_embed.tokens.weight.std().item() < 1.1
    with torch.no_grad():
        logits = m(_ids(8, 12), _ids(8, 10, bos=True)).logits
    assert 0.5 < logits.std().item() < 2.0


def test_inputs_sharing_ties_the_embeddings_but_not_the_output():
    m = _model(share_embeddings="inputs", scale_output=False)
    assert m.src_embed.tokens is m.tgt_embed.tokens
    assert m.output_proj.weight is not m.tgt_embed.tokens.weight
    with pytest.raises(ConfigError, match="share_embeddings"):
        _config(share_embeddings="inputs", tgt_vocab_size=V + 1)


def test_invalid_combinations_are_refused_naming_the_field():
    with pytest.raises(ConfigError, match="attention"):
        _config(attention="local")
    with pytest.raises(ConfigError, match="attention_score"):
        _config(attention_score="general")
    with pytest.raises(ConfigError, match="relative_max_distance"):
        _config(relative_buckets=32, relative_max_distance=8)


def test_a_checkpoint_keeps_one_shared_table_per_stack(tmp_path):
    m = _model().float()
    tok = CharTokenizer.train(["abcdefghij klmnopqrstuvwxyz"])
    cfg = m.config.replace(src_vocab_size=V, tgt_vocab_size=V)
    save_checkpoint(tmp_path, model_state=m.state_dict(), config=cfg.to_dict(),
                    tokenizer_json=tok.to_json())  # fmt: skip
    loaded = load_model(tmp_path, "cpu").model
    layers = loaded.decoder.layers
    assert layers[0].self_attn.position_bias is layers[2].self_attn.position_bias
    src, tgt = _ids(2, 5), _ids(2, 4, bos=True)
    torch.testing.assert_close(loaded(src, tgt).logits, m(src, tgt).logits)


def test_a_decoder_that_starts_from_pad_keeps_its_first_position():
    """T5's convention (BOS = pad) is allowed; the start token is never taken for padding."""
    m = _model(bos_id=0)
    src, tgt = _ids(2, 5), _ids(2, 6)
    tgt[:, 0] = 0
    tgt[1, 4:] = 0  # right padding as well
    plain = m(src, tgt).logits
    weighed = m(src, tgt, need_weights=True)
    torch.testing.assert_close(weighed.logits[0], plain[0])
    torch.testing.assert_close(weighed.logits[1, :4], plain[1, :4])
    assert weighed.decoder_self_attentions[0][:, :, :, 0].gt(0).all()
    with pytest.raises(ConfigError, match="eos_id"):
        _config(bos_id=2, eos_id=2)
