"""ALiBi slopes (Press et al., 2022, §3) and the additive bias."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from attnkit.attention import MultiHeadAttention
from attnkit.positions.alibi import ALiBi, alibi_bias, alibi_slopes


def test_slopes_for_8_heads_are_the_papers_sequence():
    # §3: "For a model with 8 heads, our slopes are 1/2^1, 1/2^2, ..., 1/2^8."
    expected = [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]
    assert alibi_slopes(8, dtype=torch.float64).tolist() == expected


def test_slopes_for_12_heads_by_hand():
    # 12 is not a power of two: the 8 slopes of 8 heads, then every other
    # slope of 16 heads. 16 heads: 2^(-8k/16) = 2^(-k/2), k = 1..16; every
    # other one from the first: k = 1, 3, 5, 7 -> 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
    eight = [2.0**-k for k in range(1, 9)]
    extra = [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    got = alibi_slopes(12, dtype=torch.float64).tolist()
    assert got == pytest.approx(eight + extra, rel=1e-15)


def test_slopes_other_counts():
    assert alibi_slopes(1, dtype=torch.float64).tolist() == [2.0**-8]
    # 6 heads: 4 heads' 2^-2, 2^-4, 2^-6, 2^-8, then 8 heads' 2^-1 and 2^-3.
    got = alibi_slopes(6, dtype=torch.float64).tolist()
    assert got == pytest.approx([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3], rel=1e-15)
    for n in (3, 5, 9, 20, 40):
        slopes = alibi_slopes(n, dtype=torch.float64)
        assert slopes.shape == (n,) and len(set(slopes.tolist())) == n  # all distinct
        assert bool((slopes > 0).all()) and bool((slopes < 1).all())
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)


def test_bias_values_and_shape():
    bias = alibi_bias(4, torch.arange(3), torch.arange(3), dtype=torch.float64)
    assert bias.shape == (4, 3, 3)
    for h, m in enumerate([2**-2, 2**-4, 2**-6, 2**-8]):
        for i in range(3):
            for j in range(3):
                assert bias[h, i, j].item() == -m * (i - j)
    symmetric = alibi_bias(4, torch.arange(3), torch.arange(3), causal=False)
    assert torch.equal(symmetric, -(alibi_bias(4, torch.arange(3), torch.arange(3)).abs()))


def test_cached_step_bias_is_the_last_rows():
    full = alibi_bias(6, torch.arange(10), torch.arange(10))
    step = alibi_bias(6, torch.tensor([9]), torch.arange(10))
    assert torch.equal(step, full[:, 9:])
    slopes = alibi_slopes(6)
    assert torch.equal(alibi_bias(slopes, torch.arange(10), torch.arange(10)), full)


def test_bias_through_sdpa_equals_explicit_softmax():
    h, t, d = 12, 7, 8
    q, k, v = (torch.randn(2, h, t, d, dtype=torch.float64) for _ in range(3))
    bias = alibi_bias(h, torch.arange(t), torch.arange(t), dtype=torch.float64)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~causal, -math.inf))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d) + bias
    ref = torch.softmax(scores.masked_fill(~causal, -math.inf), dim=-1) @ v
    torch.testing.assert_close(out, ref)


class _CountOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def test_no_python_loop_over_heads():
    # The same number of tensor ops for 8 and 64 heads: nothing runs per head.
    counts = []
    for h in (8, 64, 12, 96):
        slopes = alibi_slopes(h)
        with _CountOps() as rec:
            alibi_bias(slopes, torch.arange(5), torch.arange(5))
        counts.append(rec.count)
    assert len(set(counts)) == 1, counts


def test_bad_positions_name_the_field():
    with pytest.raises(ValueError, match="q_positions"):
        alibi_bias(4, torch.zeros(1, 3, dtype=torch.long), torch.arange(3))


def test_the_layer_module_is_the_symmetric_bias_at_its_positions_and_no_weight():
    alibi = ALiBi(6)
    assert dict(alibi.state_dict()) == {}  # the slopes are a function of h
    step = alibi(torch.tensor([7]), 10, torch.float64)  # a cached step at position 7
    want = alibi_bias(6, torch.tensor([7]), torch.arange(10), causal=False, dtype=torch.float64)
    assert torch.equal(step, want) and step.shape == (6, 1, 10)


def test_a_layer_with_alibi_adds_that_bias_to_its_scores():
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 3, alibi=ALiBi(3)).double().eval()
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    out, weights = mha(x, is_causal=True, need_weights=True)
    q, k, _ = mha.qkv_proj(x).split(24, dim=-1)
    q, k = (t.view(2, 5, 3, 8).transpose(1, 2) for t in (q, k))
    bias = alibi_bias(3, torch.arange(5), torch.arange(5), dtype=torch.float64)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-2, -1) / math.sqrt(8) + bias).masked_fill(~causal, -math.inf)
    torch.testing.assert_close(weights, torch.softmax(scores, dim=-1))
    with pytest.raises(ValueError, match="alibi"):
        MultiHeadAttention(24, 3, alibi=ALiBi(4))
