"""RMSNorm against HF's LlamaRMSNorm; build_norm by name."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnkit.blocks.norms import RMSNorm, build_norm
from attnkit.errors import ConfigError


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rmsnorm_equals_hf_llama_bit_for_bit(dtype):
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    hf = modeling_llama.LlamaRMSNorm(576, eps=1e-5)
    ours = RMSNorm(576, eps=1e-5)
    with torch.no_grad():
        hf.weight.copy_(torch.randn(576))
        ours.weight.copy_(hf.weight)
    x = (3 * torch.randn(2, 5, 576)).to(dtype)
    assert torch.equal(ours(x), hf(x))


@pytest.mark.parametrize("shape", [(1, 1, 576), (2, 5, 576), (3, 300, 64), (1, 7, 960), (4, 4096)])
def test_rmsnorm_fused_fp32_path_equals_the_formula_bit_for_bit(shape):
    # fp32 takes ATen's fused rms_norm; it must be the float32 formula exactly
    # (the half path and HF's LlamaRMSNorm compute that formula op by op)
    torch.manual_seed(shape[-1])
    norm = RMSNorm(shape[-1], eps=1e-5)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
    x = 3 * torch.randn(shape)
    formula = norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))
    assert torch.equal(norm(x), formula)
    # and it trains: gradients as the formula's (autograd through either)
    xg = x.clone().requires_grad_(True)
    norm(xg).square().sum().backward()
    x2 = x.clone().requires_grad_(True)
    w2 = norm.weight.detach().clone().requires_grad_(True)
    (w2 * (x2 * torch.rsqrt(x2.pow(2).mean(-1, keepdim=True) + 1e-5))).square().sum().backward()
    torch.testing.assert_close(xg.grad, x2.grad)
    torch.testing.assert_close(norm.weight.grad, w2.grad)


def test_rmsnorm_definition_in_float64():
    norm = RMSNorm(6, eps=1e-6).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
    x = torch.randn(3, 6, dtype=torch.float64)
    # The float32 statistics (as Llama) limit this to float32 precision.
    expected = norm.weight * x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(norm(x), expected, rtol=1e-6, atol=1e-6)
    assert norm(x).dtype == torch.float64


def test_rmsnorm_has_weight_only():
    assert [name for name, _ in RMSNorm(4).named_parameters()] == ["weight"]
    with pytest.raises(ValueError, match="eps"):
        RMSNorm(4, eps=0.0)


def test_build_norm_by_name():
    ln = build_norm("layernorm", 8, eps=1e-6)
    assert isinstance(ln, nn.LayerNorm) and ln.eps == 1e-6
    rms = build_norm("rmsnorm", 8, eps=1e-5)
    assert isinstance(rms, RMSNorm) and rms.eps == 1e-5
    with pytest.raises(ConfigError, match="^norm: .*'batchnorm'"):
        build_norm("batchnorm", 8)
