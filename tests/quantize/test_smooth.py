"""SmoothQuant in ``--precision int8``: ``Int8Linear(smooth=)``, calibration, ``quantize_model``."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from attnkit.models import DecoderOnlyLM
from attnkit.models.registry import config_from_preset
from attnkit.quantize import Int8Linear, Int8WeightOnlyLinear, quantize_model
from attnkit.quantize.smooth import input_maxima, lm_calibration, smoothing_factors


def outlier_inputs(rows: int = 16, width: int = 64, seed: int = 0) -> torch.Tensor:
    """LayerNorm-like rows with two channels 60x the others (as in Llama-type models)."""
    x = torch.randn(rows, width, generator=torch.Generator().manual_seed(seed))
    x[:, 3] *= 60.0
    x[:, 40] *= 60.0
    return x


def rel_error(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y - ref).abs().max() / ref.abs().max())


def test_smoothing_leaves_the_product_unchanged_in_exact_arithmetic():
    x = outlier_inputs().double()
    w = torch.randn(32, 64, dtype=torch.float64)
    s = smoothing_factors(w, x.abs().amax(0), alpha=0.5).double()
    torch.testing.assert_close((x / s) @ (w * s).T, x @ w.T, rtol=1e-12, atol=1e-10)
    # alpha 0.5 equalises the two ranges: max|x_j / s_j| = max|W_:,j s_j| per channel
    torch.testing.assert_close((x / s).abs().amax(0), (w * s).abs().amax(0), rtol=1e-6, atol=0)


def test_smoothed_int8_is_far_closer_to_fp32_on_outlier_channels():
    x = outlier_inputs()
    linear = nn.Linear(64, 32)
    ref = linear(x).detach()
    plain = Int8Linear.from_linear(linear)(x)
    s = smoothing_factors(linear.weight, x.abs().amax(0))
    smoothed = Int8Linear.from_linear(linear, smooth=s)(x)
    assert rel_error(smoothed, ref) < 0.02
    assert rel_error(smoothed, ref) < rel_error(plain, ref) / 3


def test_a_smoothed_state_round_trips_and_a_plain_one_is_refused():
    linear, x = nn.Linear(64, 32), outlier_inputs()
    s = smoothing_factors(linear.weight, x.abs().amax(0))
    a = Int8Linear.from_linear(linear, smooth=s)
    state = a.state_dict()
    assert set(state) == {"weight_int8", "weight_scale", "bias", "input_smooth"}
    b = Int8Linear.from_linear(nn.Linear(64, 32), smooth=torch.ones(64))
    b.load_state_dict(state)
    torch.testing.assert_close(b(x), a(x), rtol=0, atol=0)
    torch.testing.assert_close(a.weight, linear.weight.detach(), atol=0.05, rtol=0.05)
    with pytest.raises(RuntimeError, match="input_smooth"):
        Int8Linear.from_linear(nn.Linear(64, 32)).load_state_dict(state)


def test_bad_factors_and_alpha_are_refused_by_name():
    with pytest.raises(ValueError, match="smooth: expected \\(64,\\)"):
        Int8Linear.from_linear(nn.Linear(64, 8), smooth=torch.ones(63))
    with pytest.raises(ValueError, match="smooth: .*positive"):
        Int8Linear.from_linear(nn.Linear(64, 8), smooth=torch.zeros(64))
    with pytest.raises(ValueError, match="alpha"):
        smoothing_factors(torch.ones(8, 64), torch.ones(64), alpha=1.5)


def llama_like() -> DecoderOnlyLM:
    """A small RMSNorm/SwiGLU/RoPE model whose norms give two channels 10x outliers.

    (At 40x the random model is chaotic: even bf16's logits are 6% off.)"""
    config = config_from_preset(
        "decoder_only", "small", d_model=64, num_heads=4, num_kv_heads=2, d_ff=128,
        num_layers=2, vocab_size=300, dropout=0.0, positions="rotary", norm="rmsnorm",
        activation="swiglu",
    )  # fmt: skip
    torch.manual_seed(0)
    model = DecoderOnlyLM(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if type(module).__name__ == "RMSNorm":
                module.weight[[5, 37]] = 10.0
    return model


class ByteTokenizer:
    def encode(self, text: str) -> list[int]:
        return [b % 300 for b in text.encode()]


def test_calibrated_int8_model_is_closer_to_fp32_than_plain_int8():
    model = llama_like()
    ids = torch.randint(3, 300, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(ids).logits
        plain = quantize_model(copy.deepcopy(model), "int8")(ids).logits
        calibrate = lm_calibration(ByteTokenizer())
        smoothed_model = quantize_model(copy.deepcopy(model), "int8", calibrate=calibrate)
        smoothed = smoothed_model(ids).logits
    smoothed_linears = [m for m in smoothed_model.modules()
                        if isinstance(m, Int8Linear) and "smoothed" in m.extra_repr()]  # fmt: skip
    assert len(smoothed_linears) == 2 * 4 + 1  # per layer qkv, out, gate, up; lm_head
    # the gated FFN's down projection: int8 weights, bf16 activations
    assert all(isinstance(layer.ffn.down_proj, Int8WeightOnlyLinear)
               for layer in smoothed_model.layers)  # fmt: skip
    assert rel_error(smoothed, ref) < rel_error(plain, ref) / 2


def test_calibration_sees_every_linear_and_restores_the_model():
    model = llama_like()
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    maxima = input_maxima(model, linears, lm_calibration(ByteTokenizer()))
    assert set(maxima) == {id(m) for m in linears}
    assert all(maxima[id(lin)].shape == (lin.in_features,) for lin in linears)
    assert not any(lin._forward_pre_hooks for lin in linears)  # hooks removed


def test_calibrate_is_for_int8_only():
    with pytest.raises(ValueError, match="calibrate: .*'bf16'"):
        quantize_model(llama_like(), "bf16", calibrate=lambda m: None)
