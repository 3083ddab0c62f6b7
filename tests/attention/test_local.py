"""Local (sliding-window) and block-sparse attention: masks and the chunked path, fp64."""

from __future__ import annotations

import pytest
import torch

from attnkit.attention.functional import attend
from attnkit.attention.local import (
    LocalWindow,
    band_mask,
    block_sparse_mask,
    local_attention,
    sliding_window_mask,
)

TOL = dict(atol=1e-10, rtol=1e-10)


def rand(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def dense(q, k, v, mask):
    return attend(q, k, v, mask=mask)[0]


def test_band_and_window_masks_by_hand():
    m = band_mask(4, left=1, right=0)
    assert m.tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [False, True, True, False],
        [False, False, True, True],
    ]
    assert torch.equal(sliding_window_mask(4, window=2, causal=True), m)
    # Bidirectional window 2: one key on each side, plus the query itself.
    assert sliding_window_mask(4, window=2)[1].tolist() == [True, True, True, False]
    # Cached decoding: 2 queries are the last 2 of 5 keys.
    assert sliding_window_mask(2, 5, window=2, causal=True).tolist() == [
        [False, False, True, True, False],
        [False, False, False, True, True],
    ]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("t,window,block", [(37, 5, 8), (64, 16, 16), (20, 3, 7), (9, 4, 64)])
def test_chunked_equals_dense_with_the_band_mask(causal, t, window, block):
    q, k, v = rand(2, 3, t, 4), rand(2, 3, t, 4), rand(2, 3, t, 5)
    mask = sliding_window_mask(t, window=window, causal=causal)
    out, _ = local_attention(
        q, k, v, window=window, causal=causal, impl="chunked", block_size=block
    )
    torch.testing.assert_close(out, dense(q, k, v, mask), **TOL)


def test_chunked_with_fewer_queries_than_keys_matches_dense():
    q, k, v = rand(1, 2, 6, 4), rand(1, 2, 19, 4), rand(1, 2, 19, 4)
    for causal in (False, True):
        mask = sliding_window_mask(6, 19, window=4, causal=causal)
        out, _ = local_attention(q, k, v, window=4, causal=causal, impl="chunked", block_size=4)
        torch.testing.assert_close(out, dense(q, k, v, mask), **TOL)


@pytest.mark.parametrize("causal", [False, True])
def test_window_covering_everything_equals_dense_exactly(causal):
    t = 12
    q, k, v = rand(2, 2, t, 4), rand(2, 2, t, 4), rand(2, 2, t, 4)
    full, _ = attend(q, k, v, is_causal=causal)
    for impl in ("dense", "chunked"):
        out, _ = local_attention(q, k, v, window=2 * t, causal=causal, impl=impl, block_size=5)
        torch.testing.assert_close(out, full, **TOL)
    assert sliding_window_mask(t, window=2 * t).all()


def test_global_tokens_mask_behaves_as_specified():
    t, w = 10, 2
    m = block_sparse_mask(t, window=w, global_tokens=[0, 7])
    band = sliding_window_mask(t, window=w)
    assert m[0].all() and m[7].all()  # global queries see every key
    assert m[:, 0].all() and m[:, 7].all()  # every query sees the global keys
    others = [i for i in range(t) if i not in (0, 7)]
    sub = m[others][:, others]
    assert torch.equal(sub, band[others][:, others])  # elsewhere only the band
    # Causal: the same, but nobody sees a later key, global or not.
    mc = block_sparse_mask(t, window=w, global_tokens=[0, 7], causal=True)
    assert torch.equal(mc, m & torch.ones(t, t, dtype=torch.bool).tril())
    assert mc[9, 7] and not mc[6, 7] and mc[7, :8].all() and not mc[7, 8:].any()
    # An int n means the first n positions.
    assert torch.equal(
        block_sparse_mask(t, window=w, global_tokens=2),
        block_sparse_mask(t, window=w, global_tokens=[0, 1]),
    )


@pytest.mark.parametrize("causal", [False, True])
def test_chunked_with_global_tokens_and_padding_equals_dense(causal):
    t = 29
    q, k, v = rand(2, 2, t, 4), rand(2, 2, t, 4), rand(2, 2, t, 3)
    real = torch.ones(2, t, dtype=torch.bool)
    real[1, 21:] = False
    g = [0, 3, 17]
    mask = block_sparse_mask(t, window=4, global_tokens=g, causal=causal)
    expected = dense(q, k, v, mask & real[:, None, None, :])
    out, _ = local_attention(
        q,
        k,
        v,
        window=4,
        causal=causal,
        global_tokens=g,
        key_padding_mask=real,
        impl="chunked",
        block_size=6,
    )
    torch.testing.assert_close(out, expected, **TOL)


def test_gradients_of_chunked_match_dense():
    t = 21
    q, k, v = (rand(1, 2, t, 4).requires_grad_() for _ in range(3))
    out, _ = local_attention(
        q, k, v, window=5, causal=True, global_tokens=1, impl="chunked", block_size=4
    )
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    mask = block_sparse_mask(t, window=5, global_tokens=1, causal=True)
    ref = torch.autograd.grad(dense(q, k, v, mask).square().sum(), (q, k, v))
    for a, b in zip(grads, ref):
        torch.testing.assert_close(a, b, **TOL)


def test_weights_and_bad_arguments():
    q = rand(1, 1, 6, 2)
    out, w = local_attention(q, q, q, window=2, causal=True, need_weights=True)
    assert w.shape == (1, 1, 6, 6) and (w.triu(1) == 0).all() and (w.tril(-2) == 0).all()
    with pytest.raises(ValueError, match="window"):
        local_attention(q, q, q, window=0)
    with pytest.raises(ValueError, match="impl"):
        local_attention(q, q, q, window=2, impl="sparse")
    with pytest.raises(ValueError, match="global_tokens"):
        local_attention(q, q, q, window=2, global_tokens=[9])
    with pytest.raises(ValueError, match="need_weights"):
        local_attention(q, q, q, window=2, impl="chunked", need_weights=True)
    with pytest.raises(ValueError, match="key_padding_mask"):
        local_attention(q, q, q, window=2, key_padding_mask=torch.ones(1, 5, dtype=torch.bool))


def test_queries_with_no_real_key_in_reach_give_zeros():
    t = 13
    q, k, v = rand(2, 1, t, 4), rand(2, 1, t, 4), rand(2, 1, t, 4)
    real = torch.ones(2, t, dtype=torch.bool)
    real[1, :5] = False  # left padding: row 1's first queries see only padding
    for window in (1, 3):
        mask = sliding_window_mask(t, window=window, causal=True) & real[:, None, None, :]
        out, _ = local_attention(
            q,
            k,
            v,
            window=window,
            causal=True,
            key_padding_mask=real,
            impl="chunked",
            block_size=4,
        )
        assert torch.isfinite(out).all() and (out[1, :, :5] == 0).all()
        torch.testing.assert_close(out, dense(q, k, v, mask), **TOL)


@pytest.mark.slow
def test_flex_forward_matches_dense():
    # Compiles (~10 s on CPU); forward only: FlexAttention has no CPU backward in torch 2.13.
    t = 256
    q, k, v = (torch.randn(1, 2, t, 16) for _ in range(3))
    mask = block_sparse_mask(t, window=32, global_tokens=2, causal=True)
    out, _ = local_attention(q, k, v, window=32, causal=True, global_tokens=2, impl="flex")
    torch.testing.assert_close(out, dense(q, k, v, mask), atol=1e-5, rtol=1e-5)


def test_the_layer_window_places_queries_anywhere_among_the_keys():
    # A static cache's step: queries at positions 5, 6 over its whole capacity of 9
    # keys (not the last keys); the rows are those of the full sequence's mask.
    for causal in (False, True):
        window = LocalWindow(3, global_tokens=1, causal=causal)
        full = window.mask(torch.arange(9), 9)
        assert torch.equal(full, block_sparse_mask(9, window=3, global_tokens=1, causal=causal))
        assert torch.equal(window.mask(torch.tensor([5, 6]), 9), full[5:7])
    # More global tokens than keys so far (a first step): the ones that exist.
    assert window.mask(torch.tensor([0]), 1).tolist() == [[True]]
    with pytest.raises(ValueError, match="q_positions"):
        window.mask(torch.tensor([[0]]), 1)


@pytest.mark.parametrize("mask_kind", ["none", "padding", "full"])
def test_the_layer_window_over_a_whole_sequence_equals_the_dense_band(mask_kind):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 300, 8) for _ in range(3))  # long: the chunked path
    window = LocalWindow(16, global_tokens=2, causal=True)
    mask = None
    if mask_kind == "padding":
        mask = torch.ones(2, 1, 1, 300, dtype=torch.bool)
        mask[1, ..., 250:] = False
    elif mask_kind == "full":  # a (B, 1, T, T) mask can only go the dense way
        mask = torch.rand(2, 1, 300, 300, generator=torch.Generator().manual_seed(1)) > 0.2
    out, _ = window.attend(q, k, v, mask=mask, is_causal=False, dropout_p=0.0, need_weights=False)
    dense = window.mask(torch.arange(300), 300)
    dense = dense if mask is None else dense & mask
    want, _ = attend(q, k, v, mask=dense)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
