"""Rotary embeddings: against a complex-number reference, against HF Llama, relative property."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnkit.positions.rotary import (
    RotaryEmbedding,
    apply_rotary,
    rotary_inverse_frequencies,
    rotate_half,
)


def complex_reference(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """RoPE as complex multiplication, rotate-half pairing: ``z_i = x[i] + 1j x[i + d/2]``.

    Pair ``i`` turns by ``m * theta^(-2i/d)`` at position ``m`` (RoFormer §3.4.2),
    all in float64/complex128 and written independently of the module.
    """
    d = x.size(-1)
    half = d // 2
    i = torch.arange(half, dtype=torch.float64)
    freq = theta ** (-2.0 * i / d)
    angle = positions.to(torch.float64)[:, None] * freq[None, :]  # (T, d/2)
    z = torch.complex(x[..., :half].double(), x[..., half:].double())
    z = z * torch.polar(torch.ones_like(angle), angle)
    return torch.cat((z.real, z.imag), dim=-1)


def test_matches_complex_reference_in_float64():
    rope = RotaryEmbedding(16, theta=10000.0, max_len=64, dtype=torch.float64)
    q = torch.randn(2, 3, 10, 16, dtype=torch.float64)
    k = torch.randn(2, 1, 10, 16, dtype=torch.float64)
    positions = torch.arange(5, 15)
    cos, sin = rope(positions)
    rq, rk = apply_rotary(q, k, cos, sin)
    torch.testing.assert_close(rq, complex_reference(q, positions, 10000.0), rtol=0, atol=1e-12)
    torch.testing.assert_close(rk, complex_reference(k, positions, 10000.0), rtol=0, atol=1e-12)


def test_rotate_half_is_multiplication_by_i():
    x = torch.randn(4, 8, dtype=torch.float64)
    z = torch.complex(x[:, :4], x[:, 4:]) * 1j
    torch.testing.assert_close(rotate_half(x), torch.cat((z.real, z.imag), -1))


def test_relative_property_in_float64():
    # q_m . k_n depends only on m - n (§3.4.2): shifting both positions changes nothing.
    rope = RotaryEmbedding(32, theta=100000.0, max_len=512, dtype=torch.float64)
    q = torch.randn(1, 1, 1, 32, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 32, dtype=torch.float64)

    def score(m: int, n: int) -> float:
        cq, sq = rope(torch.tensor([m]))
        ck, sk = rope(torch.tensor([n]))
        rq, _ = apply_rotary(q, q, cq, sq)
        _, rk = apply_rotary(k, k, ck, sk)
        return float((rq * rk).sum())

    for m, n in [(7, 3), (3, 7), (100, 0), (0, 0)]:
        for shift in (1, 17, 300):
            assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-12)
    assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-6)  # it does see the distance


def _hf():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama import modeling_llama

    config = transformers.LlamaConfig(
        hidden_size=576,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=256,
        rope_theta=100000.0,
    )
    return modeling_llama, modeling_llama.LlamaRotaryEmbedding(config)


def test_tables_equal_hf_llama_bit_for_bit():
    modeling_llama, hf_rope = _hf()
    ours = RotaryEmbedding(64, theta=100000.0, max_len=256)
    cos, sin = hf_rope(torch.zeros(1), torch.arange(256)[None])
    assert torch.equal(cos[0], ours.cos) and torch.equal(sin[0], ours.sin)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_apply_equals_hf_apply_rotary_pos_emb(dtype):
    modeling_llama, hf_rope = _hf()
    ours = RotaryEmbedding(64, theta=100000.0, max_len=256)
    q = torch.randn(2, 9, 6, 64).to(dtype)
    k = torch.randn(2, 3, 6, 64).to(dtype)
    # Per-row positions (B, T), as for left-padded prompts.
    positions = torch.tensor([[0, 1, 2, 3, 4, 5], [40, 41, 42, 43, 44, 45]])
    hf_q, hf_k = modeling_llama.apply_rotary_pos_emb(q, k, *hf_rope(q, positions))
    our_q, our_k = apply_rotary(q, k, *ours(positions))
    assert torch.equal(our_q, hf_q) and torch.equal(our_k, hf_k)


def test_cached_step_equals_full_sequence():
    # Rotating a prompt at once, or its last t positions as a cached step
    # (queries at pos .. pos + t - 1), gives the same rows.
    rope = RotaryEmbedding(8, max_len=16)
    x = torch.randn(2, 2, 12, 8)
    full, _ = apply_rotary(x, x, *rope(torch.arange(12)))
    step, _ = apply_rotary(x[:, :, 9:], x[:, :, 9:], *rope(torch.arange(9, 12)))
    assert torch.equal(step, full[:, :, 9:])


class _RecordOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_device_positions_need_no_host_sync():
    # A static cache keeps `pos` (1,) on the device; reading it on the host
    # would be `aten._local_scalar_dense` (`.item()`), a sync per step.
    rope = RotaryEmbedding(8, max_len=32)
    pos = torch.tensor([5])
    with _RecordOps() as rec:
        cos, sin = rope(pos + torch.arange(3))
    assert not any("_local_scalar_dense" in op for op in rec.ops), rec.ops
    assert torch.equal(cos, rope.cos[5:8]) and torch.equal(sin, rope.sin[5:8])


def test_tables_are_not_in_the_state_dict():
    rope = RotaryEmbedding(8, theta=500.0, max_len=4)
    assert dict(rope.state_dict()) == {} and rope.max_len == 4


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="head_dim"):
        RotaryEmbedding(7)
    with pytest.raises(ValueError, match="rope_theta"):
        rotary_inverse_frequencies(8, 0.0)
    with pytest.raises(ValueError, match="max_len"):
        RotaryEmbedding(8, max_len=0)
    with pytest.raises(ValueError, match="positions"):
        RotaryEmbedding(8)(torch.zeros(1, 1, 1, dtype=torch.long))
