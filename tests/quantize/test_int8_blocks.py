"""``Int8BlockLinear``: int8 codes in blocks of 32 (GGUF Q8_0) on the int4 kernel as two
nibble planes: the planes' arithmetic, the codes read back, the kernel against the
exact weight, the stored form."""

from __future__ import annotations

import pytest
import torch

from attnkit.quantize import Int8BlockLinear, float_linears, model_bytes
from attnkit.quantize.int4 import dequantize_groups
from attnkit.quantize.int8_blocks import nibble_planes

# bf16 activations and bf16 copies of the scales (as Int4Linear): max |y - y_exact| over
# max |y_exact|, measured 2-4e-3 on Gaussian inputs.
KERNEL_REL_ERROR = 0.01


def _codes(n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    q[0, :4] = torch.tensor([-128, 127, 0, -1], dtype=torch.int8)  # the range's ends
    scale = torch.rand(n, k // 32, generator=g) * 0.02 + 1e-4
    return q, scale


def _exact(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    n, k = q.shape
    return (q.double().view(n, -1, 32) * scale.double()[..., None]).view(n, k)


def test_the_two_planes_are_the_weight():
    q, scale = _codes(16, 64)
    codes, scales, zeros = nibble_planes(q, scale)
    assert codes.shape == (32, 64) and int(codes.max()) <= 15
    planes = dequantize_groups(codes, scales.double(), zeros.double())
    assert torch.equal(planes[:16] + planes[16:], _exact(q, scale))


def test_codes_come_back_and_the_weight_is_exact():
    q, scale = _codes(24, 96)
    linear = Int8BlockLinear.from_codes(q, scale)
    assert torch.equal(linear.codes(), q)
    assert torch.equal(linear.weight.double(), _exact(q, scale).float().double())
    state = linear.state_dict()
    assert torch.equal(state["weight_int8"], q) and torch.equal(state["weight_scale"], scale)


def test_the_kernel_against_the_exact_weight():
    q, scale = _codes(48, 128, seed=1)
    bias = torch.randn(48)
    linear = Int8BlockLinear.from_codes(q, scale, bias)
    x = torch.randn(3, 5, 128)
    got = linear(x)
    want = x.double() @ _exact(q, scale).t() + bias.double()
    assert got.shape == (3, 5, 48) and got.dtype == torch.float32
    error = (got.double() - want).abs().max() / want.abs().max()
    assert 0 < error < KERNEL_REL_ERROR


def test_a_state_dict_loads_back_and_float_linears_is_exact():
    q, scale = _codes(16, 64)
    source = Int8BlockLinear.from_codes(q, scale, torch.ones(16))
    target = Int8BlockLinear.from_codes(torch.zeros_like(q), torch.ones(16, 2), torch.zeros(16))
    assert not target.load_state_dict(source.state_dict()).missing_keys
    assert torch.equal(target.codes(), q) and torch.equal(target.bias, torch.ones(16))
    model = torch.nn.Sequential(target)
    assert model_bytes(model) == 16 * 64 + 12 * 16 * 2 + 4 * 16  # a byte per weight
    float_linears(model)
    assert type(model[0]) is torch.nn.Linear
    assert torch.equal(model[0].weight, source.weight)


def test_shapes_the_kernel_cannot_take_are_refused():
    q, scale = _codes(16, 64)
    with pytest.raises(ValueError, match="blocks of 32"):
        Int8BlockLinear.from_codes(q[:, :48], scale[:, :1])
    with pytest.raises(ValueError, match="multiple of 16"):
        Int8BlockLinear.from_codes(q[:4], scale[:4])
    with pytest.raises(ValueError, match="int8 codes"):
        Int8BlockLinear.from_codes(q.to(torch.int16), scale)
