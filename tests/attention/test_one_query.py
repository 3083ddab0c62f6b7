"""The CPU decode-step attention (one query per row) against SDPA and the textbook formula."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.attention import functional
from attnkit.attention.functional import attend
from attnkit.attention.gqa import repeat_kv
from attnkit.attention.one_query import one_query_attention, use_one_query_path


def tensors(b: int = 3, h: int = 4, h_kv: int = 4, t: int = 7, d: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, 1, d, generator=g)
    k = torch.randn(b, h_kv, t, d, generator=g)
    v = torch.randn(b, h_kv, t, d, generator=g)
    return q, k, v


def textbook(q, k, v, mask, scale=None):
    """softmax(q k^T / sqrt(d)) v with masked keys removed, zeros for rows with no key."""
    groups = q.size(1) // k.size(1)
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v


@pytest.mark.parametrize("h_kv", [4, 2, 1])  # MHA, GQA, MQA
@pytest.mark.parametrize("mask_shape", [None, "batch", "heads"])
def test_matches_sdpa_and_the_textbook(h_kv: int, mask_shape: str | None) -> None:
    q, k, v = tensors(h_kv=h_kv)
    lengths = torch.tensor([7, 3, 5])
    mask = None
    if mask_shape == "batch":
        mask = (torch.arange(7) < lengths[:, None])[:, None, None, :]
    elif mask_shape == "heads":
        mask = torch.rand(3, 4, 1, 7, generator=torch.Generator().manual_seed(1)) > 0.3
        mask[..., 0] = True
    ours = one_query_attention(q, k, v, mask, None)
    groups = 4 // h_kv
    sdpa = F.scaled_dot_product_attention(
        q, repeat_kv(k, groups), repeat_kv(v, groups), attn_mask=mask
    )
    torch.testing.assert_close(ours, sdpa, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours, textbook(q, k, v, mask), rtol=1e-5, atol=1e-6)


def test_a_row_with_no_key_gives_zeros_not_nan() -> None:
    q, k, v = tensors()
    mask = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    mask[1] = False
    out = one_query_attention(q, k, v, mask, None)
    assert torch.isfinite(out).all() and (out[1] == 0).all()
    torch.testing.assert_close(out, textbook(q, k, v, mask), rtol=1e-5, atol=1e-6)


def test_scale_and_bf16() -> None:
    q, k, v = tensors()
    torch.testing.assert_close(
        one_query_attention(q, k, v, None, 0.5), textbook(q, k, v, None, 0.5), rtol=1e-5, atol=1e-6
    )
    ours = one_query_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), None, None)
    assert ours.dtype == torch.bfloat16
    torch.testing.assert_close(ours.float(), textbook(q, k, v, None), rtol=3e-2, atol=3e-2)


def test_attend_routes_decode_steps_here_and_nothing_else(monkeypatch) -> None:
    calls = []
    real = functional.one_query_attention
    monkeypatch.setattr(functional, "one_query_attention", lambda *a: calls.append(1) or real(*a))
    q, k, v = tensors()
    mask = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    out, _ = attend(q, k, v, mask=mask, is_causal=True)  # Tq = 1: causal is a no-op
    assert calls == [1]
    torch.testing.assert_close(out, textbook(q, k, v, mask), rtol=1e-5, atol=1e-6)
    attend(q, k, v, need_weights=True)  # weights asked for: the reference path
    attend(q.requires_grad_(), k, v)  # training: SDPA, for its backward
    attend(torch.randn(3, 4, 2, 8), k, v)  # two queries per row
    assert calls == [1]
    assert not use_one_query_path(q, k)  # q requires grad now


def test_kv_heads_must_divide_query_heads() -> None:
    q, k, _ = tensors(h=4, h_kv=3)
    assert not use_one_query_path(q, k)


def test_a_mask_changed_in_place_is_seen() -> None:
    """The additive form is remembered per mask tensor; an in-place update must not be missed."""
    q, k, v = tensors()
    mask = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    first = one_query_attention(q, k, v, mask, None)
    torch.testing.assert_close(first, textbook(q, k, v, mask), rtol=1e-5, atol=1e-6)
    mask[0, ..., 4:] = False  # as a cache's validity mask is updated
    mask[2] = False
    second = one_query_attention(q, k, v, mask, None)
    torch.testing.assert_close(second, textbook(q, k, v, mask), rtol=1e-5, atol=1e-6)
    assert (second[2] == 0).all() and not torch.equal(second[0], first[0])
    same_values = mask.clone()  # another tensor: computed afresh, same answer
    torch.testing.assert_close(one_query_attention(q, k, v, same_values, None), second)


def test_inference_mode_masks_work_and_in_place_updates_are_seen() -> None:
    """inference_mode tensors keep no version counter: their mask is never remembered."""
    q, k, v = tensors()
    with torch.inference_mode():
        mask = torch.ones(3, 1, 1, 7, dtype=torch.bool)
        first = one_query_attention(q, k, v, mask, None)
        mask[1] = False
        second = one_query_attention(q, k, v, mask, None)
    torch.testing.assert_close(first, textbook(q, k, v, torch.ones_like(mask)))
    assert (second[1] == 0).all() and torch.equal(second[0], first[0])
