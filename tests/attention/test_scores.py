"""Score functions against hand-written loops, and inside attend / multi-head attention."""

import math

import pytest
import torch

from attnkit.attention import (
    AdditiveScore,
    CrossAttention,
    GeneralScore,
    LocationScore,
    MultiHeadAttention,
    ScaledDotScore,
    attend,
    build_score,
    dot_score,
    padding_mask,
    scaled_dot_score,
)
from attnkit.errors import ConfigError
from attnkit.models import EncoderDecoder, TransformerConfig

B, H, TQ, TK, D = 2, 3, 4, 5, 6


def _randn(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


# -- naive references: one (query, key) pair at a time ------------------------------


def _loop(q, k, pair):
    """Apply ``pair(q_vec, k_vec) -> scalar`` to every (.., i, j); leading dims flattened."""
    lead = q.shape[:-2]
    qf, kf = q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:])
    rows = []
    for n in range(qf.size(0)):
        per_query = [
            torch.stack([pair(qf[n, i], kf[n, j]) for j in range(kf.size(1))])
            for i in range(qf.size(1))
        ]
        rows.append(torch.stack(per_query))
    return torch.stack(rows).reshape(*lead, q.size(-2), k.size(-2))


def _general_pair(m):
    return lambda qi, kj: qi @ m.weight @ kj


def _additive_pair(m):
    wq, bq, wk, v = m.query_proj.weight, m.query_proj.bias, m.key_proj.weight, m.v.weight[0]
    return lambda qi, kj: v @ torch.tanh(wq @ qi + bq + wk @ kj)


CASES = {
    "dot": (lambda: dot_score, lambda m: lambda qi, kj: qi @ kj),
    "scaled_dot": (lambda: scaled_dot_score, lambda m: lambda qi, kj: qi @ kj / math.sqrt(D)),
    "general": (lambda: GeneralScore(D, D + 1).double(), _general_pair),
    "additive": (lambda: AdditiveScore(D, D + 1, 7).double(), _additive_pair),
}


@pytest.mark.parametrize("name", CASES)
def test_score_equals_loop_in_values_and_gradients(name):
    make, ref_pair = CASES[name]
    score = make()
    dk = D if name in ("dot", "scaled_dot") else D + 1
    q, k = _randn(B, H, TQ, D), _randn(B, H, TK, dk)
    got = score(q, k)
    want = _loop(q, k, ref_pair(score))
    assert got.shape == (B, H, TQ, TK)
    torch.testing.assert_close(got, want)
    params = list(score.parameters()) if isinstance(score, torch.nn.Module) else []
    weight = torch.randn(B, H, TQ, TK, dtype=torch.float64)
    g_got = torch.autograd.grad((got * weight).sum(), [q, k, *params])
    g_want = torch.autograd.grad((want * weight).sum(), [q, k, *params])
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", ["general", "additive"])
def test_projected_keys_give_the_same_scores(name):
    score = CASES[name][0]()
    q, k = _randn(B, TQ, D), _randn(B, TK, D + 1)
    torch.testing.assert_close(score(q, score.project_keys(k), projected=True), score(q, k))


def test_additive_equals_the_concat_form():
    m = AdditiveScore(D, D + 2, 5).double()
    w = torch.cat([m.query_proj.weight, m.key_proj.weight], dim=1)  # W = [W_q, W_k]
    q, k = _randn(B, TQ, D), _randn(B, TK, D + 2)
    want = torch.empty(B, TQ, TK, dtype=torch.float64)
    for b in range(B):
        for i in range(TQ):
            for j in range(TK):
                concat = torch.cat([q[b, i], k[b, j]])
                want[b, i, j] = m.v.weight[0] @ torch.tanh(w @ concat + m.query_proj.bias)
    torch.testing.assert_close(m(q, k), want)


def test_location_scores_the_query_alone_and_cuts_to_the_source_length():
    m = LocationScore(D, max_src_len=9).double()
    q = _randn(B, TQ, D)
    got = m(q, torch.zeros(B, TK, 3))
    want = torch.stack(
        [torch.stack([m.proj.weight @ q[b, i] + m.proj.bias for i in range(TQ)]) for b in range(B)]
    )[..., :TK]
    torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="^max_src_len:"):
        m(q, torch.zeros(B, 10, 3))


def test_location_masks_padding_and_never_gives_nan():
    m = LocationScore(D, max_src_len=8).double()
    q, k, v = _randn(3, 2, D), _randn(3, 5, D), _randn(3, 5, 4)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    out, w = attend(q, k, v, mask=mask[:, None, :], score=m, need_weights=True)
    assert not out.isnan().any() and not w.isnan().any()
    assert w[0, :, 3:].abs().max() == 0  # padding gets no weight
    torch.testing.assert_close(w[:2].sum(-1), torch.ones(2, 2, dtype=torch.float64))
    assert out[2].abs().max() == 0 and w[2].abs().max() == 0  # no key: zeros
    # Row 0 is softmax(W_a q) renormalised over the 3 real positions.
    logits = (m.proj.weight @ q[0, 0] + m.proj.bias)[:3]
    torch.testing.assert_close(w[0, 0, :3], torch.softmax(logits, dim=-1))
    grads = torch.autograd.grad(out.sum(), [q, *m.parameters()])
    assert all(torch.isfinite(g).all() for g in grads)


# -- inside attend -----------------------------------------------------------------


@pytest.mark.parametrize("is_causal", [False, True])
def test_attend_with_scaled_dot_equals_the_sdpa_path_and_the_explicit_path(is_causal):
    q, k, v = _randn(B, H, 5, D), _randn(B, H, 5, D), _randn(B, H, 5, D)
    mask = padding_mask(torch.tensor([[3, 4, 5, 0, 0], [3, 4, 5, 6, 7]]), 0)
    base, none = attend(q, k, v, mask=mask, is_causal=is_causal)
    for score in (scaled_dot_score, ScaledDotScore()):
        out, w = attend(q, k, v, mask=mask, is_causal=is_causal, score=score)
        assert w is None
        assert torch.equal(out, base)  # the very same fused call
    # A score the fast path does not recognise goes the explicit way: same result.
    explicit, w = attend(
        q, k, v, mask=mask, is_causal=is_causal, score=lambda a, b: scaled_dot_score(a, b)
    )
    assert w is None
    torch.testing.assert_close(explicit, base)
    g_fast = torch.autograd.grad(base.square().sum(), (q, k, v))
    g_expl = torch.autograd.grad(explicit.square().sum(), (q, k, v))
    for a, b in zip(g_fast, g_expl):
        torch.testing.assert_close(a, b)


def test_attend_with_dot_equals_the_textbook_formula():
    q, k, v = _randn(B, H, TQ, D), _randn(B, H, TK, D), _randn(B, H, TK, D)
    want_w = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
    fast, _ = attend(q, k, v, score=dot_score)
    out, w = attend(q, k, v, score=dot_score, need_weights=True)
    torch.testing.assert_close(w, want_w)
    torch.testing.assert_close(out, want_w @ v)
    torch.testing.assert_close(fast, want_w @ v)


@pytest.mark.parametrize("name", ["general", "additive"])
def test_attend_with_a_custom_score_is_the_explicit_formula(name):
    score = CASES[name][0]()
    q, k, v = _randn(B, TQ, D), _randn(B, TK, D + 1), _randn(B, TK, 3)
    ids = torch.tensor([[5, 6, 0, 0, 0], [0, 0, 0, 0, 0]])
    mask = padding_mask(ids, 0)[:, 0]  # (B, 1, TK)
    out, w = attend(q, k, v, mask=mask, score=score, need_weights=True)
    want_w = torch.softmax(score(q, k).masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(w[0], want_w[0])
    torch.testing.assert_close(out[0], want_w[0] @ v[0])
    assert not out.isnan().any() and out[1].abs().max() == 0  # all-masked row: zeros
    with pytest.raises(ValueError, match="^scale:"):
        attend(q, k, v, score=score, scale=0.5)


# -- inside multi-head attention ---------------------------------------------------


@pytest.mark.parametrize("score", ["dot", "scaled_dot", "general", "additive"])
def test_multihead_with_each_score_runs_and_ignores_appended_padding(score):
    torch.manual_seed(0)
    cross = CrossAttention(16, 4, score=score).double().eval()
    x, mem = _randn(2, 3, 16), _randn(2, 5, 16)
    ids = torch.tensor([[4, 5, 6, 0, 0], [4, 5, 6, 7, 8]])
    base, w = cross(x, mem, mask=padding_mask(ids, 0), need_weights=True)
    assert base.shape == (2, 3, 16) and w.shape == (2, 4, 3, 5)
    assert w[0, :, :, 3:].abs().max() == 0
    padded_mem = torch.cat([mem, torch.randn(2, 2, 16, dtype=torch.float64)], dim=1)
    padded_ids = torch.cat([ids, torch.zeros(2, 2, dtype=torch.long)], dim=1)
    for need_weights in (False, True):
        out, _ = cross(x, padded_mem, mask=padding_mask(padded_ids, 0), need_weights=need_weights)
        torch.testing.assert_close(out, base)
    # Self-attention with a causal mask, and gradients reaching every parameter.
    mha = MultiHeadAttention(16, 4, score=score).double().eval()
    self_out, _ = mha(x, is_causal=True)
    (base.square().sum() + self_out.square().sum()).backward()
    params = [*cross.parameters(), *mha.parameters()]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)


def test_multihead_refuses_scores_without_key_contents():
    with pytest.raises(ConfigError, match="^score:"):
        MultiHeadAttention(16, 4, score="location")
    with pytest.raises(ConfigError, match="^score:"):
        build_score("cosine")
    with pytest.raises(ConfigError, match="^max_src_len:"):
        build_score("location", query_dim=4)


@pytest.mark.parametrize("score", ["dot", "general", "additive"])
def test_transformer_with_a_score_decodes_like_its_forward(score):
    config = TransformerConfig(
        d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1, num_decoder_layers=1,
        src_vocab_size=20, tgt_vocab_size=20, dropout=0.0, attention_score=score,
    )  # fmt: skip
    m = EncoderDecoder(config).double().eval()
    src, tgt = torch.randint(3, 20, (2, 5)), torch.randint(3, 20, (2, 4))
    full = m(src, tgt).logits
    state = m.start(src)
    steps = [m.step(tgt[:, t], state)[0] for t in range(4)]
    torch.testing.assert_close(torch.stack(steps, 1), full)


def test_transformer_config_score_field_is_optional_and_validated():
    old = TransformerConfig().to_dict()
    del old["attention_score"]
    assert TransformerConfig.from_dict(old).attention_score == "scaled_dot"
    with pytest.raises(ConfigError, match="^attention_score:"):
        TransformerConfig(attention_score="location")
    with pytest.raises(ConfigError, match="^attention_score:"):
        TransformerConfig(attention_score="additive", positions="relative")
