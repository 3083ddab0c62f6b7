"""Grouped-query attention: repeat_kv, SDPA's enable_gqa, MHA as the special case."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.attention.functional import attend
from attnkit.attention.gqa import check_kv_heads, repeat_kv
from attnkit.errors import ConfigError


def test_repeat_kv_layout():
    x = torch.arange(2 * 3 * 1 * 1).reshape(2, 3, 1, 1)
    out = repeat_kv(x, 2)
    assert out.shape == (2, 6, 1, 1)
    # Head j of the result is kv head j // 2 (Llama's grouping).
    assert out[0, :, 0, 0].tolist() == [0, 0, 1, 1, 2, 2]
    assert repeat_kv(x, 1) is x
    with pytest.raises(ValueError, match="n_rep"):
        repeat_kv(x, 0)


def _grouped_reference(q, k, v, mask):
    """Each query head attends with its group's kv head, head by head (the definition)."""
    h, h_kv = q.size(1), k.size(1)
    outs = []
    for i in range(h):
        j = i // (h // h_kv)
        outs.append(attend(q[:, i : i + 1], k[:, j : j + 1], v[:, j : j + 1], mask=mask)[0])
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("num_kv_heads", [1, 3, 9])
def test_repeat_kv_and_enable_gqa_match_the_definition(num_kv_heads):
    q = torch.randn(2, 9, 5, 8, dtype=torch.float64)
    k = torch.randn(2, num_kv_heads, 7, 8, dtype=torch.float64)
    v = torch.randn(2, num_kv_heads, 7, 8, dtype=torch.float64)
    mask = torch.ones(5, 7, dtype=torch.bool).tril(2)
    n_rep = check_kv_heads(9, num_kv_heads)
    expected = _grouped_reference(q, k, v, mask)
    out, _ = attend(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask=mask)
    torch.testing.assert_close(out, expected)
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(fused, expected)


def test_enable_gqa_is_bit_identical_to_repeat_kv_on_cpu():
    q = torch.randn(1, 9, 1, 64)
    k, v = torch.randn(1, 3, 40, 64), torch.randn(1, 3, 40, 64)
    a = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    b = F.scaled_dot_product_attention(q, repeat_kv(k, 3), repeat_kv(v, 3))
    assert torch.equal(a, b)


def test_gqa_with_all_heads_is_mha():
    # num_kv_heads == num_heads: no sharing, nothing repeated, plain MHA.
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    mha, _ = attend(q, k, v, is_causal=True)
    gqa, _ = attend(q, repeat_kv(k, check_kv_heads(4, 4)), repeat_kv(v, 1), is_causal=True)
    assert torch.equal(gqa, mha)
    fused = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(fused, mha)


def test_check_kv_heads_names_the_field():
    assert check_kv_heads(9, 3) == 3 and check_kv_heads(8, 1) == 8
    for bad in (0, 2, 4):
        with pytest.raises(ConfigError, match="^num_kv_heads"):
            check_kv_heads(9, bad)
