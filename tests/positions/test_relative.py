"""Relative position representations (Shaw et al., 2018): the efficient split
inside ``attend`` equals the paper's formulas written out in full, and a model
with ``positions="relative"`` keeps every invariance of the encoder-decoder."""

import math

import pytest
import torch

from attnkit.attention import MultiHeadAttention, attend, padding_mask
from attnkit.models import EncoderDecoder, TransformerConfig
from attnkit.positions import RelativePositions, RelativePositionTerms, relative_index

# -- the paper's formulas, with the full (B, h, Tq, Tk, d) tensors ----------------


def _naive(q, k, v, a_k, a_v, index, mask=None):
    """e_ij = q_i (k_j + a^K_ij)^T / sqrt(d); z_i = sum_j alpha_ij (v_j + a^V_ij)."""
    b, h, tq, d = q.shape
    tk = k.size(2)
    ak = a_k[index].expand(b, h, tq, tk, d)  # (B, h, Tq, Tk, d), materialised on purpose
    keys = k[:, :, None, :, :] + ak
    scores = (q[:, :, :, None, :] * keys).sum(-1) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    alpha = torch.softmax(scores, dim=-1)
    values = v[:, :, None, :, :]
    if a_v is not None:
        values = values + a_v[index].expand(b, h, tq, tk, d)
    return (alpha[..., None] * values).sum(-2), alpha


def _inputs(b=2, h=3, tq=5, tk=5, d=4, k=2, values=True):
    g = torch.Generator().manual_seed(3)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)

    q, key, val = rnd(b, h, tq, d), rnd(b, h, tk, d), rnd(b, h, tk, d)
    a_k, a_v = rnd(2 * k + 1, d), (rnd(2 * k + 1, d) if values else None)
    return q, key, val, a_k, a_v, relative_index(tq, tk, k)


def test_relative_index_clips_and_aligns_queries_to_the_last_keys():
    idx = relative_index(3, 3, 1)
    assert idx.tolist() == [[1, 2, 2], [0, 1, 2], [0, 0, 1]]  # clip(j - i, -1, 1) + 1
    # 2 queries against 5 keys: the queries are positions 3 and 4.
    torch.testing.assert_close(relative_index(2, 5, 2), relative_index(5, 5, 2)[3:])
    torch.testing.assert_close(relative_index(2, 5, 2, offset=0), relative_index(5, 5, 2)[:2])


CASES = {
    "plain": dict(tq=5, tk=5),
    "padding": dict(tq=5, tk=5, mask="pad"),
    "causal": dict(tq=5, tk=5, causal=True),
    "causal+padding": dict(tq=5, tk=5, causal=True, mask="pad"),
    "cached (Tq < Tk)": dict(tq=2, tk=6, causal=True),
    "long (clipped)": dict(tq=9, tk=9, causal=True),
}


@pytest.mark.parametrize("values", [True, False], ids=["key+value", "key only"])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_efficient_split_equals_naive_in_values_and_gradients(case, need_weights, values):
    tq, tk = case["tq"], case["tk"]
    q, k, v, a_k, a_v, index = _inputs(tq=tq, tk=tk, values=values)
    mask = None
    if case.get("mask") == "pad":
        ids = torch.tensor([[5] * (tk - 2) + [0, 0], [5] * tk])
        mask = padding_mask(ids, pad_id=0)
    naive_mask = mask
    if case.get("causal"):
        causal = torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq)
        naive_mask = causal if mask is None else mask & causal

    terms = RelativePositionTerms(index=index, key=a_k, value=a_v)
    out, w = attend(
        q, k, v, mask=mask, is_causal=case.get("causal", False), need_weights=need_weights,
        position=terms,
    )  # fmt: skip
    ref, alpha = _naive(q, k, v, a_k, a_v, index, naive_mask)
    torch.testing.assert_close(out, ref)
    if need_weights:
        torch.testing.assert_close(w, alpha)
    else:
        assert w is None

    params = [t for t in (q, k, v, a_k, a_v) if t is not None]
    upstream = torch.randn_like(ref)
    grads = torch.autograd.grad((out * upstream).sum(), params)
    grads_ref = torch.autograd.grad((ref * upstream).sum(), params)
    for g, gr in zip(grads, grads_ref):
        torch.testing.assert_close(g, gr)


def test_fully_masked_row_gives_zeros_not_nan():
    q, k, v, a_k, a_v, index = _inputs(tq=3, tk=4)
    mask = torch.tensor([[True, True, False, False], [False] * 4, [True] * 4])
    terms = RelativePositionTerms(index=index, key=a_k, value=a_v)
    out, w = attend(q, k, v, mask=mask, need_weights=True, position=terms)
    assert torch.isfinite(out).all() and out[:, :, 1].abs().max() == 0
    assert w[:, :, 1].abs().max() == 0


def test_multihead_rejects_a_wrong_head_dim():
    rel = RelativePositions(head_dim=8, max_relative_position=4)
    mha = MultiHeadAttention(32, 4, relative_positions=rel)
    x = torch.randn(2, 3, 32)
    assert mha(x)[0].shape == (2, 3, 32)
    with pytest.raises(ValueError, match="relative_positions"):
        MultiHeadAttention(32, 2, relative_positions=rel)
    with pytest.raises(ValueError, match="max_relative_position"):
        RelativePositions(8, 0)


# -- the model ---------------------------------------------------------------------

V = 30


def _model(**overrides) -> EncoderDecoder:
    cfg = dict(
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=2,
        num_decoder_layers=2,
        src_vocab_size=V,
        tgt_vocab_size=V,
        dropout=0.0,
        positions="relative",
        max_relative_position=3,
    )
    cfg.update(overrides)
    return EncoderDecoder(TransformerConfig(**cfg)).double().eval()


def _ids(b, t, *, bos=False):
    ids = torch.randint(3, V, (b, t))
    if bos:
        ids[:, 0] = 1
    return ids


def test_relative_tables_sit_in_self_attention_only():
    m = _model()
    k, d = 3, 8
    for layer in [*m.encoder.layers, *m.decoder.layers]:
        assert layer.self_attn.relative_positions.key.shape == (2 * k + 1, d)
        assert layer.self_attn.relative_positions.value.shape == (2 * k + 1, d)
    for layer in m.decoder.layers:
        assert not any("relative" in name for name, _ in layer.cross_attn.named_modules())
    plain = _model(positions="sinusoidal")
    assert m.num_parameters() - plain.num_parameters() == 4 * 2 * (2 * k + 1) * d
    # Relative only: no absolute positions are added to the embeddings.
    ids = _ids(1, 4)
    torch.testing.assert_close(m.src_embed(ids), m.src_embed.tokens(ids))


@pytest.mark.parametrize("norm_position", ["post", "pre"])
@pytest.mark.parametrize("positions", ["relative", "sinusoidal+relative"])
def test_cached_decoding_equals_full_forward(norm_position, positions):
    # 8 target steps with k = 3: distances are clipped along the way.
    m = _model(norm_position=norm_position, positions=positions)
    src, tgt = _ids(3, 6), _ids(3, 8, bos=True)
    src[1, 4:] = 0  # padded source row
    full = m(src, tgt).logits
    state = m.start(src, max_steps=2)  # small capacity: exercises growth too
    steps = []
    for t in range(tgt.size(1)):
        logits, state = m.step(tgt[:, t], state)
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), full)
    # A chunk prefill, a beam reorder, then one more step.
    idx = torch.tensor([2, 0, 0])
    state = m.start(src)
    last, state = m.step(tgt[:, :5], state)
    torch.testing.assert_close(last, full[:, 4])
    nxt, _ = m.step(tgt[idx, 5], state.reorder(idx))
    torch.testing.assert_close(nxt, full[idx, 5])


@pytest.mark.parametrize("positions", ["relative", "learned+relative"])
def test_appending_padding_and_future_tokens_never_change_real_logits(positions):
    m = _model(positions=positions)
    src, tgt = _ids(2, 7), _ids(2, 5, bos=True)
    base = m(src, tgt).logits
    pad_src = torch.cat([src, torch.zeros(2, 3, dtype=torch.long)], 1)
    pad_tgt = torch.cat([tgt, torch.zeros(2, 4, dtype=torch.long)], 1)
    for need_weights in (False, True):
        out = m(pad_src, pad_tgt, need_weights=need_weights).logits
        torch.testing.assert_close(out[:, :5], base)
    changed = tgt.clone()
    changed[:, 3:] = _ids(2, 2)
    torch.testing.assert_close(m(src, changed).logits[:, :3], base[:, :3])


def test_relative_only_model_sees_word_order():
    # Without absolute positions, only the relative tables tell word order apart.
    m = _model()
    src, tgt = _ids(1, 6), _ids(1, 4, bos=True)
    swapped = src[:, [1, 0, 2, 3, 4, 5]]
    assert not torch.allclose(m(src, tgt).logits, m(swapped, tgt).logits)
    for layer in m.encoder.layers:
        torch.nn.init.zeros_(layer.self_attn.relative_positions.key)
        torch.nn.init.zeros_(layer.self_attn.relative_positions.value)
    torch.testing.assert_close(m(src, tgt).logits, m(swapped, tgt).logits)


def test_config_variants_validation_and_old_json():
    c = TransformerConfig(positions="learned+relative", max_relative_position=8)
    assert (c.absolute_positions, c.relative_positions) == ("learned", True)
    assert TransformerConfig(positions="relative").absolute_positions == "none"
    assert not TransformerConfig().relative_positions
    assert TransformerConfig.from_json(c.to_json()) == c
    # Configs written before relative positions existed still load.
    old = TransformerConfig().to_dict()
    del old["max_relative_position"]
    assert TransformerConfig.from_dict(old).max_relative_position == 16
    for bad, field in [
        ({"max_relative_position": 0}, "max_relative_position"),
        ({"max_relative_position": 2.0}, "max_relative_position"),
        ({"positions": "relative+learned"}, "positions"),
        ({"positions": "sinusoidal+relative", "d_model": 9, "num_heads": 1}, "d_model"),
    ]:
        with pytest.raises(ValueError, match=rf"^{field}:"):
            TransformerConfig(**bad)
    # Relative only has no sinusoids, so an odd width is fine.
    TransformerConfig(positions="relative", d_model=9, num_heads=1)
