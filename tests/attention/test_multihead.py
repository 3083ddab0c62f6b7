import pytest
import torch
from torch import nn

from attnkit.attention import CrossAttention, KVCache, MultiHeadAttention, padding_mask


def _pair(d=16, h=4):
    ours = MultiHeadAttention(d, h).double()
    ref = nn.MultiheadAttention(d, h, batch_first=True).double()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv_proj.weight)
        ref.in_proj_bias.copy_(ours.qkv_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ours.eval(), ref.eval()


def test_self_attention_equals_torch_nn_with_padding():
    ours, ref = _pair()
    x = torch.randn(3, 7, 16, dtype=torch.float64)
    ids = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 2 + [0] * 5])
    out, w = ours(x, mask=padding_mask(ids, 0), need_weights=True)
    ref_out, ref_w = ref(x, x, x, key_padding_mask=ids == 0, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=1e-10, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-10, rtol=0)
    fast, none = ours(x, mask=padding_mask(ids, 0))
    assert none is None
    torch.testing.assert_close(fast, ref_out, atol=1e-10, rtol=0)


def _cross_pair(d=16, h=4):
    ours = CrossAttention(d, h).double()
    ref = nn.MultiheadAttention(d, h, batch_first=True).double()
    with torch.no_grad():  # in_proj rows: queries, then keys and values (= kv_proj)
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.kv_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.kv_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ours.eval(), ref.eval()


def test_cross_attention_has_separate_query_and_key_value_projections():
    cross = CrossAttention(16, 4, num_kv_heads=2)
    shapes = {k: tuple(v.shape) for k, v in cross.state_dict().items()}
    assert shapes == {
        "q_proj.weight": (16, 16), "q_proj.bias": (16,),
        "kv_proj.weight": (2 * 2 * 4, 16), "kv_proj.bias": (2 * 2 * 4,),
        "out_proj.weight": (16, 16), "out_proj.bias": (16,),
    }  # fmt: skip
    assert list(shapes)[:2] == ["q_proj.weight", "q_proj.bias"]  # the fused layout's order


def test_cross_attention_equals_torch_nn():
    ours, ref = _cross_pair()
    x = torch.randn(2, 4, 16, dtype=torch.float64)
    mem = torch.randn(2, 6, 16, dtype=torch.float64)
    out, _ = ours(x, mem)
    ref_out, _ = ref(x, mem, mem)
    torch.testing.assert_close(out, ref_out, atol=1e-10, rtol=0)
    # Pre-projected keys/values (what the KV cache holds) give the same result.
    out_kv, _ = ours(x, ours.project_kv(mem))
    torch.testing.assert_close(out_kv, out)


def test_causal_self_attention_equals_torch_nn():
    ours, ref = _pair()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    out, _ = ours(x, is_causal=True)
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    ref_out, _ = ref(x, x, x, attn_mask=causal)
    torch.testing.assert_close(out, ref_out, atol=1e-10, rtol=0)


def test_cached_self_attention_equals_full_causal():
    ours, _ = _pair()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    full, _ = ours(x, is_causal=True)
    cache = KVCache(1, 2, 4, 4, capacity=2, dtype=torch.float64)  # forces growth
    steps = []
    for t in range(5):
        out, _ = ours(x[:, t : t + 1], is_causal=True, cache=cache.layers()[0])
        cache.advance()
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, 1), full)


def test_rejects_indivisible_heads():
    with pytest.raises(ValueError, match="num_heads"):
        MultiHeadAttention(10, 3)


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_beams_fold_onto_a_shared_source(kv_heads):
    # 2 sentences x 3 beams of queries against 2 source rows equals the same
    # queries against the source repeated per beam (outputs and weights).
    torch.manual_seed(0)
    mha = CrossAttention(16, 4, num_kv_heads=kv_heads).double().eval()
    x = torch.randn(6, 2, 16, dtype=torch.float64)
    memory = torch.randn(2, 5, 16, dtype=torch.float64)
    mask = padding_mask(torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]), 0)
    kv = mha.project_kv(memory)
    shared, w_shared = mha(x, kv, mask=mask, need_weights=True)
    repeated = tuple(t.repeat_interleave(3, dim=0) for t in kv)
    ref, w_ref = mha(x, repeated, mask=mask.repeat_interleave(3, dim=0), need_weights=True)
    torch.testing.assert_close(shared, ref)
    torch.testing.assert_close(w_shared, w_ref)
