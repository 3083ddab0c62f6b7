"""The CPU decode backend (one query per row): against SDPA and the textbook formula, and
as the models run it (installed by ``stepper_for``, masks prepared once per decode)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.attention import REFERENCE, CrossAttention, MultiHeadAttention, masks, one_query
from attnkit.attention.gqa import repeat_kv
from attnkit.attention.masks import prepare_mask
from attnkit.attention.one_query import OneQueryDecode, one_query_attention
from attnkit.decoding import greedy_search
from attnkit.inference import stepper_for
from attnkit.models import EncoderDecoder, TransformerConfig


def tensors(
    b: int = 3, h: int = 4, h_kv: int = 4, t: int = 7, d: int = 8, seed: int = 0, queries: int = 1
):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, queries, d, generator=g)
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


@pytest.mark.parametrize("queries", [1, 5])  # a decode step; beam search's cross-attention
@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize("h_kv", [4, 2, 1])  # MHA, GQA, MQA
@pytest.mark.parametrize("mask_shape", [None, "batch", "heads"])
def test_matches_sdpa_and_the_textbook(
    h_kv: int, mask_shape: str | None, prepared: bool, queries: int
) -> None:
    q, k, v = tensors(h_kv=h_kv, queries=queries)
    lengths = torch.tensor([7, 3, 5])
    mask = None
    if mask_shape == "batch":
        mask = (torch.arange(7) < lengths[:, None])[:, None, None, :]
    elif mask_shape == "heads":
        gen = torch.Generator().manual_seed(1)
        mask = torch.rand(3, 4, queries, 7, generator=gen) > 0.3
        mask[..., 0] = True
    given = prepare_mask(mask, q.dtype) if prepared and mask is not None else mask
    ours = one_query_attention(q, k, v, given, None)
    groups = 4 // h_kv
    sdpa = F.scaled_dot_product_attention(
        q, repeat_kv(k, groups), repeat_kv(v, groups), attn_mask=mask
    )
    torch.testing.assert_close(ours, sdpa, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours, textbook(q, k, v, mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("prepared", [False, True])
def test_a_row_with_no_key_gives_zeros_not_nan(prepared: bool) -> None:
    q, k, v = tensors()
    mask = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    mask[1] = False
    out = one_query_attention(q, k, v, prepare_mask(mask, q.dtype) if prepared else mask, None)
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
    # A mask prepared for float32 scores still works on bf16 ones (converted at the call).
    mask = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    mask[0, ..., 5:] = False
    bf16 = one_query_attention(
        q.bfloat16(), k.bfloat16(), v.bfloat16(), prepare_mask(mask, torch.float32), None
    )
    torch.testing.assert_close(bf16.float(), textbook(q, k, v, mask), rtol=3e-2, atol=3e-2)


def test_the_backend_takes_decode_steps_and_hands_the_rest_to_attend(monkeypatch) -> None:
    calls = []
    real = one_query.one_query_attention
    monkeypatch.setattr(one_query, "one_query_attention", lambda *a: calls.append(1) or real(*a))
    backend = OneQueryDecode()
    q, k, v = tensors()
    mask = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    out, _ = backend(q, k, v, mask=mask, is_causal=True)  # Tq = 1: causal is a no-op
    assert calls == [1]
    torch.testing.assert_close(out, textbook(q, k, v, mask), rtol=1e-5, atol=1e-6)
    backend(q, k, v, need_weights=True)  # weights asked for: attend's explicit path
    backend(q, k, v, dropout_p=0.1)  # dropout: attend
    backend(q, k, v, bias=torch.zeros(4, 1, 7))  # a score bias (ALiBi): attend
    two, _ = backend(torch.randn(3, 4, 2, 8), k, v, is_causal=True)  # a causal prompt: attend
    many = torch.randn(3, 4, one_query.FEW_QUERIES + 1, 8)
    backend(many, k, v)  # more queries than FEW_QUERIES: attend's fused kernel
    assert calls == [1] and two.shape == (3, 4, 2, 8)
    few = torch.randn(3, 4, 4, 8)  # beam search's cross-attention: 4 beams' queries at once
    out, _ = backend(few, k, v, mask=mask)
    assert calls == [1, 1]
    torch.testing.assert_close(out, textbook(few, k, v, mask), rtol=1e-5, atol=1e-6)
    q3, k3, v3 = tensors(h=4, h_kv=3)
    with pytest.raises(RuntimeError):  # attend's error: 3 key heads cannot serve 4 queries
        backend(q3, k3, v3)
    assert calls == [1, 1]


def small_model(**overrides) -> EncoderDecoder:
    config = TransformerConfig(
        d_model=32, num_heads=4, num_kv_heads=2, d_ff=64, num_encoder_layers=1,
        num_decoder_layers=2, src_vocab_size=30, tgt_vocab_size=30, max_len=32, dropout=0.0,
        **overrides,
    )  # fmt: skip
    torch.manual_seed(0)
    return EncoderDecoder(config).eval()


def padded_source() -> torch.Tensor:
    src = torch.randint(3, 30, (3, 6), generator=torch.Generator().manual_seed(2))
    src[1, 3:] = 0  # padding: the decoder state keeps a source mask
    return src


def test_stepper_for_installs_it_on_the_cpu_and_decodes_as_the_reference(monkeypatch) -> None:
    model = small_model()
    src = padded_source()
    reference = greedy_search(model, src, max_len=8)  # built with REFERENCE
    calls = []
    real = one_query.one_query_attention
    monkeypatch.setattr(one_query, "one_query_attention", lambda *a: calls.append(a[3]) or real(*a))
    stepper = stepper_for(model)
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention | CrossAttention)]
    assert len(attentions) == 5 and all(isinstance(m.backend, OneQueryDecode) for m in attentions)
    fast = greedy_search(stepper, src, max_len=8)
    assert fast.tokens == reference.tokens
    torch.testing.assert_close(torch.tensor(fast.scores), torch.tensor(reference.scores))
    # Both decoder layers' self- and cross-attention, at every step; cross-attention
    # sees the source mask the decoding state prepared. And the encoder's one layer,
    # once: 6 source positions are few queries, unmasked by causality.
    assert len(calls) == 4 * 8 + 1
    assert sum(isinstance(m, masks.PreparedMask) for m in calls) == 2 * 8
    stepper_for(model, "compiled")  # the compiled step keeps the fused kernel
    assert all(m.backend is REFERENCE for m in attentions)


def test_the_source_mask_is_made_additive_once_per_decoding_call(monkeypatch) -> None:
    model = small_model()
    stepper = stepper_for(model)
    made = []
    real = masks.additive_mask
    spy = lambda *a: made.append(1) or real(*a)  # noqa: E731
    monkeypatch.setattr(masks, "additive_mask", spy)  # what prepare_mask calls
    monkeypatch.setattr(one_query, "additive_mask", spy)  # what the backend would call
    out = greedy_search(stepper, padded_source(), max_len=8)
    # Once in start for the decoder (2 layers x 8 steps of cross-attention reuse it), and
    # once for the encoder's one layer (6 positions: few queries), at its call.
    assert made == [1, 1]
    assert [len(t) for t in out.tokens] == [8, 8, 8]
