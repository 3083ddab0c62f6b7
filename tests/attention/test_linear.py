"""Linear attention (Katharopoulos et al., 2020): the three forms against the naive one, fp64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.attention.linear import (
    DEFAULT_EPS,
    LinearAttentionState,
    causal_linear_attention,
    linear_attention,
    linear_attention_step,
    linear_attention_weights,
)
from attnkit.attention.linear_module import LinearSelfAttention

TOL = dict(atol=1e-10, rtol=1e-10)


def naive(q, k, v, *, causal=False, real=None, eps=DEFAULT_EPS):
    """The quadratic definition: (phi(Q) phi(K)^T masked) V / row sums, written independently."""
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    a = torch.einsum("bhid,bhjd->bhij", phi_q, phi_k)
    if causal:
        t = a.size(-1)
        a = a * torch.tril(torch.ones(t, t, dtype=a.dtype))
    if real is not None:
        a = a * real[:, None, None, :].to(a.dtype)
    return torch.einsum("bhij,bhje->bhie", a, v) / (a.sum(-1, keepdim=True) + eps)


def rand(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def test_non_causal_equals_naive():
    q, k, v = rand(2, 3, 5, 4), rand(2, 3, 7, 4), rand(2, 3, 7, 6)
    torch.testing.assert_close(linear_attention(q, k, v), naive(q, k, v), **TOL)


def test_key_padding_removes_padded_keys_exactly():
    q, k, v = rand(2, 2, 5, 4), rand(2, 2, 7, 4), rand(2, 2, 7, 3)
    real = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    out = linear_attention(q, k, v, key_padding_mask=real)
    torch.testing.assert_close(out, naive(q, k, v, real=real), **TOL)
    # The padded row equals the same row computed without its padding at all.
    short = linear_attention(q[1:], k[1:, :, :4], v[1:, :, :4])
    torch.testing.assert_close(out[1:], short, **TOL)
    # (B, 1, 1, Tk) masks, as attnkit.attention.masks.padding_mask makes, work too.
    torch.testing.assert_close(
        linear_attention(q, k, v, key_padding_mask=real[:, None, None]), out, **TOL
    )


@pytest.mark.parametrize("t,chunk", [(1, 4), (9, 4), (16, 4), (13, 64), (13, 1)])
def test_causal_prefix_sums_equal_masked_quadratic(t, chunk):
    q, k, v = rand(2, 3, t, 4), rand(2, 3, t, 4), rand(2, 3, t, 5)
    out, _ = causal_linear_attention(q, k, v, chunk_size=chunk)
    torch.testing.assert_close(out, naive(q, k, v, causal=True), **TOL)


def test_recurrent_steps_equal_parallel_causal_form():
    b, h, t, d, dv = 2, 3, 11, 4, 5
    q, k, v = rand(b, h, t, d), rand(b, h, t, d), rand(b, h, t, dv)
    parallel, final = causal_linear_attention(q, k, v, chunk_size=4)
    state = LinearAttentionState.zeros(b, h, d, dv, dtype=torch.float64)
    outs = []
    for i in range(t):
        o, state = linear_attention_step(q[:, :, i], k[:, :, i], v[:, :, i], state)
        outs.append(o)
    torch.testing.assert_close(torch.stack(outs, dim=2), parallel, **TOL)
    torch.testing.assert_close(state.s, final.s, **TOL)
    torch.testing.assert_close(state.z, final.z, **TOL)
    # (B, h, 1, d) inputs give (B, h, 1, dv) outputs.
    o4, _ = linear_attention_step(q[:, :, :1], k[:, :, :1], v[:, :, :1], final)
    assert o4.shape == (b, h, 1, dv)


def test_prefill_state_then_continue_equals_one_pass():
    q, k, v = rand(1, 2, 10, 4), rand(1, 2, 10, 4), rand(1, 2, 10, 4)
    full, _ = causal_linear_attention(q, k, v, chunk_size=3)
    _, st = causal_linear_attention(q[:, :, :6], k[:, :, :6], v[:, :, :6], chunk_size=4)
    rest, _ = causal_linear_attention(q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], state=st)
    torch.testing.assert_close(rest, full[:, :, 6:], **TOL)


def test_state_reorder_follows_beams():
    st = LinearAttentionState(rand(3, 2, 4, 5), rand(3, 2, 4))
    idx = torch.tensor([2, 2, 0])
    r = st.reorder(idx)
    torch.testing.assert_close(r.s, st.s[idx])
    torch.testing.assert_close(r.z, st.z[idx])
    r.s.add_(1.0)  # a reordered state never aliases its source
    torch.testing.assert_close(st.s[2], r.s[0] - 1.0)


def test_weights_reproduce_outputs():
    q, k, v = rand(2, 2, 6, 4), rand(2, 2, 6, 4), rand(2, 2, 6, 3)
    w = linear_attention_weights(q, k, causal=True)
    out, _ = causal_linear_attention(q, k, v)
    torch.testing.assert_close(w @ v, out, **TOL)
    torch.testing.assert_close(w.triu(1), torch.zeros_like(w))


def test_module_forward_step_and_gradients():
    torch.manual_seed(0)
    attn = LinearSelfAttention(8, 2).double()
    x = rand(2, 7, 8).requires_grad_()
    out, w = attn(x, is_causal=True, need_weights=True)
    assert out.shape == (2, 7, 8) and w.shape == (2, 2, 7, 7)
    out.sum().backward()
    assert x.grad is not None and attn.qkv_proj.weight.grad.abs().sum() > 0
    state = attn.empty_state(2, dtype=torch.float64)
    steps = []
    for i in range(7):
        o, state = attn.step(x[:, i : i + 1].detach(), state)
        steps.append(o)
    torch.testing.assert_close(torch.cat(steps, 1), out.detach(), **TOL)


def test_bad_inputs_name_the_argument():
    q = rand(1, 1, 4, 2)
    with pytest.raises(ValueError, match="key_padding_mask"):
        linear_attention(q, q, q, key_padding_mask=torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="q:"):
        causal_linear_attention(q, rand(1, 1, 5, 2), rand(1, 1, 5, 2))
    with pytest.raises(ValueError, match="chunk_size"):
        causal_linear_attention(q, q, q, chunk_size=0)
