import math

import pytest
import torch

from attnkit.attention import attend, causal_mask, padding_mask


def _qkv(b=2, h=3, tq=5, tk=6, d=8, requires_grad=False):
    g = torch.Generator().manual_seed(1)
    return [
        torch.randn(b, h, t, d, generator=g, dtype=torch.float64, requires_grad=requires_grad)
        for t in (tq, tk, tk)
    ]


def test_matches_textbook_formula():
    q, k, v = _qkv()
    out, w = attend(q, k, v, need_weights=True)
    expected_w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)), dim=-1)
    torch.testing.assert_close(w, expected_w)
    torch.testing.assert_close(out, expected_w @ v)


@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_path_equals_reference_in_values_and_gradients(is_causal):
    tq = 6 if is_causal else 5
    q, k, v = _qkv(tq=tq, requires_grad=True)
    ids = torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 10]])
    mask = padding_mask(ids, pad_id=0)
    fast, none = attend(q, k, v, mask=mask, is_causal=is_causal)
    assert none is None
    ref, w = attend(q, k, v, mask=mask, is_causal=is_causal, need_weights=True)
    torch.testing.assert_close(fast, ref)
    grads_fast = torch.autograd.grad(fast.square().sum(), (q, k, v))
    grads_ref = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for gf, gr in zip(grads_fast, grads_ref):
        torch.testing.assert_close(gf, gr)
    # Masked keys get exactly zero weight.
    assert w[0, :, :, 4:].abs().max() == 0


def test_causal_with_fewer_queries_aligns_to_last_keys():
    # A cached decoder feeds the last 2 of 6 positions: query i sees keys <= 4 + i.
    q, k, v = _qkv(tq=2, tk=6)
    out, w = attend(q, k, v, is_causal=True, need_weights=True)
    assert w[..., 0, 5].abs().max() == 0 and w[..., 0, 4].min() > 0
    full_q = torch.cat([q.new_zeros(2, 3, 4, 8), q], dim=2)
    full, _ = attend(full_q, k, v, mask=causal_mask(6))
    torch.testing.assert_close(out, full[:, :, 4:])


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_row_gives_zeros_not_nan(need_weights):
    q, k, v = _qkv(tq=3, tk=4, requires_grad=True)
    mask = torch.tensor([[True, True, False, False], [False] * 4, [True] * 4])
    out, w = attend(q, k, v, mask=mask, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert out[:, :, 1].abs().max() == 0
    assert out[:, :, 0].abs().max() > 0
    if need_weights:
        assert w[:, :, 1].abs().max() == 0
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


def test_dropout_is_applied_only_when_asked():
    q, k, v = _qkv()
    a, _ = attend(q, k, v)
    b, _ = attend(q, k, v, dropout_p=0.5)
    assert not torch.allclose(a, b)
