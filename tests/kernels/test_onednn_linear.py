"""oneDNN's fp32 linear gives F.linear's values and gradients, and swaps in place."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnkit.kernels.onednn_linear import (
    OneDNNLinearModule,
    available,
    linear,
    use_onednn_linear,
)
from attnkit.models import TransformerConfig, build_model

pytestmark = pytest.mark.skipif(not available(), reason="this torch build has no oneDNN")


@pytest.mark.parametrize("shape", [(7, 16), (3, 5, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_values_and_gradients_match_f_linear(shape, bias):
    torch.manual_seed(0)
    x = torch.randn(*shape, requires_grad=True)
    w = torch.randn(12, 16, requires_grad=True)
    b = torch.randn(12, requires_grad=True) if bias else None
    g = torch.randn(*shape[:-1], 12)
    want = F.linear(x, w, b)
    want.backward(g)
    grads = [x.grad.clone(), w.grad.clone(), None if b is None else b.grad.clone()]
    for t in (x, w, b):
        if t is not None:
            t.grad = None
    got = linear(x, w, b)
    got.backward(g)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, grads[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, grads[1], rtol=1e-5, atol=1e-5)
    if b is not None:
        torch.testing.assert_close(b.grad, grads[2], rtol=1e-5, atol=1e-5)


def test_fp64_falls_back_to_f_linear_exactly():
    x, w = torch.randn(4, 8, dtype=torch.float64), torch.randn(3, 8, dtype=torch.float64)
    assert torch.equal(linear(x, w), F.linear(x, w))


def test_a_whole_model_switches_in_place_keeping_parameters_and_ties():
    config = TransformerConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1, num_decoder_layers=1,
        src_vocab_size=40, tgt_vocab_size=40, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = build_model(config).train()
    names = {k: v.data_ptr() for k, v in model.state_dict().items()}
    src = torch.randint(3, 40, (2, 6))
    want = model(src, src).logits
    want.sum().backward()
    want_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    before, rng = model.output_proj, torch.get_rng_state()
    count = use_onednn_linear(model)
    assert torch.equal(torch.get_rng_state(), rng)  # nothing was initialised
    # Replaced, not re-classed: the old module is still a plain nn.Linear.
    assert type(before) is nn.Linear and model.output_proj is not before
    assert model.output_proj.weight is before.weight
    assert count == sum(isinstance(m, nn.Linear) for m in model.modules()) > 0
    assert all(type(m) is not nn.Linear for m in model.modules())
    assert {k: v.data_ptr() for k, v in model.state_dict().items()} == names
    assert model.output_proj.weight is model.src_embed.tokens.weight  # still tied
    assert isinstance(model.output_proj, OneDNNLinearModule)
    got = model(src, src).logits
    got.sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want_grads[n], rtol=1e-3, atol=1e-4, msg=n)
