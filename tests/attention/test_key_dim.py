"""A key size of its own (``key_dim``, d_k < d_model / h; the paper's Table 3, row B):
exact against attention written with d_k-sized heads, and decoded as the reference."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.attention import CrossAttention, MultiHeadAttention
from attnkit.decoding import beam_search, greedy_search
from attnkit.errors import ConfigError
from attnkit.inference import stepper_for
from attnkit.models import EncoderDecoder, TransformerConfig


def textbook(q, k, v, d_k, causal=False):
    """softmax(q k^T / sqrt(d_k)) v over (B, h, T, d_k) queries/keys and (B, h, S, d_v) values."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if causal:
        t, s = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(t, s, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def heads(x, h, d):
    return x.view(x.size(0), x.size(1), h, d).transpose(1, 2)


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_equals_d_k_sized_heads_in_float64(causal):
    torch.manual_seed(0)
    d_model, h, d_k = 32, 4, 3
    attn = MultiHeadAttention(d_model, h, key_dim=d_k).double().eval()
    assert attn.qkv_proj.out_features == h * d_k * 2 + d_model
    x = torch.randn(2, 5, d_model, dtype=torch.float64)
    out, _ = attn(x, is_causal=causal)
    q, k, v = attn.qkv_proj(x).split((h * d_k, h * d_k, d_model), dim=-1)
    want = textbook(heads(q, h, d_k), heads(k, h, d_k), heads(v, h, 8), d_k, causal)
    want = attn.out_proj(want.transpose(1, 2).reshape(2, 5, d_model))
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_cross_attention_equals_d_k_sized_heads_in_float64():
    torch.manual_seed(1)
    d_model, h, d_k = 32, 4, 5
    attn = CrossAttention(d_model, h, key_dim=d_k).double().eval()
    x = torch.randn(2, 3, d_model, dtype=torch.float64)
    memory = torch.randn(2, 7, d_model, dtype=torch.float64)
    out, weights = attn(x, memory, need_weights=True)
    k, v = attn.kv_proj(memory).split((h * d_k, d_model), dim=-1)
    q = heads(attn.q_proj(x), h, d_k)
    want = textbook(q, heads(k, h, d_k), heads(v, h, 8), d_k)
    want = attn.out_proj(want.transpose(1, 2).reshape(2, 3, d_model))
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    assert weights is not None and weights.shape == (2, h, 3, 7)


def test_modules_refuse_a_key_size_they_cannot_pad_to():
    with pytest.raises(ConfigError, match="key_dim: must be between 1 and"):
        MultiHeadAttention(32, 4, key_dim=9)
    with pytest.raises(ConfigError, match="key_dim"):
        MultiHeadAttention(32, 4, key_dim=4, score="general")
    with pytest.raises(ConfigError, match="key_dim"):
        CrossAttention(32, 4, key_dim=4, score="additive")


def test_the_fast_cpu_path_decodes_a_small_key_model_as_the_reference():
    config = TransformerConfig(
        d_model=32, num_heads=4, key_dim=3, d_ff=64, num_encoder_layers=2,
        num_decoder_layers=2, src_vocab_size=40, tgt_vocab_size=40, max_len=32, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = EncoderDecoder(config).eval()
    src = torch.randint(3, 40, (3, 6), generator=torch.Generator().manual_seed(2))
    src[1, 4:] = 0
    ref_greedy = greedy_search(model, src, max_len=10)
    ref_beam = beam_search(model, src, beam_size=3, max_len=10)
    fast = stepper_for(model)  # the CPU path: the model's cache, two-GEMM attention
    assert greedy_search(fast, src, max_len=10).tokens == ref_greedy.tokens
    got = beam_search(fast, src, beam_size=3, max_len=10)
    assert got.tokens == ref_beam.tokens
    torch.testing.assert_close(torch.tensor(got.scores), torch.tensor(ref_beam.scores))
