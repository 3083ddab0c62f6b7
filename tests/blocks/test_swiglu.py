"""SwiGLU against HF's LlamaMLP with the same weights."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.blocks.swiglu import SwiGLU


def test_equals_hf_llama_mlp():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaMLP

    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, hidden_act="silu")
    hf = LlamaMLP(config)
    ours = SwiGLU(64, 96)
    # Same names: HF's state dict loads as is, strictly.
    ours.load_state_dict(hf.state_dict(), strict=True)
    x = torch.randn(2, 5, 64)
    assert torch.equal(ours(x), hf(x))


def test_definition_and_bias():
    ffn = SwiGLU(8, 12).double()
    x = torch.randn(3, 8, dtype=torch.float64)
    w, v, w2 = ffn.gate_proj.weight, ffn.up_proj.weight, ffn.down_proj.weight
    expected = (F.silu(x @ w.T) * (x @ v.T)) @ w2.T  # Shazeer (2020), eq. 6
    torch.testing.assert_close(ffn(x), expected)
    assert all(m.bias is None for m in (ffn.gate_proj, ffn.up_proj, ffn.down_proj))
    assert all(m.bias is not None for m in SwiGLU(8, 12, bias=True).children())
