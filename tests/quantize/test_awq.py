"""Activation-aware int4 (``attnkit.quantize.awq``): exact folding, closer than RTN."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from attnkit.models import DecoderOnlyLM
from attnkit.models.registry import config_from_preset
from attnkit.quantize import Int4Linear, quantize_model
from attnkit.quantize.awq import apply_awq, awq_scales, clip_weight
from attnkit.quantize.int4 import dequantize_groups, quantize_groups
from attnkit.quantize.model import convertible_linears
from attnkit.quantize.smooth import lm_calibration

VOCAB = 300


def llama_like(norm_position: str = "pre", seed: int = 0) -> DecoderOnlyLM:
    """A small RMSNorm/SwiGLU/RoPE model (grouped-query heads) whose norms give three
    input channels 10x the others, as Llama-type models have."""
    config = config_from_preset(
        "decoder_only", "small", d_model=64, num_heads=4, num_kv_heads=2, d_ff=128,
        num_layers=2, vocab_size=VOCAB, dropout=0.0, positions="rotary", norm="rmsnorm",
        activation="swiglu", norm_position=norm_position,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = DecoderOnlyLM(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if type(module).__name__ == "RMSNorm":
                module.weight[[5, 22, 37]] = 10.0
    return model


class ByteTokenizer:
    def encode(self, text: str) -> list[int]:
        return [b % VOCAB for b in text.encode()]


CALIBRATE = lm_calibration(ByteTokenizer())


def ids() -> torch.Tensor:
    return torch.randint(3, VOCAB, (2, 32), generator=torch.Generator().manual_seed(1))


def logits(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(ids()).logits


def test_folding_the_scales_leaves_the_float_model_unchanged():
    """In float64, so that rounding cannot hide a fold that is off (fp32: ~1e-5)."""
    model = llama_like().double()
    ref = logits(model)
    norms_before = [m.weight.clone() for m in model.modules() if type(m).__name__ == "RMSNorm"]
    scaled = apply_awq(model, CALIBRATE, convertible_linears(model), 32, clip=False)
    # per layer: qkv (its norm), gate and up (theirs), down (up's rows), out (v's rows)
    assert scaled == 2 * 5
    norms_after = [m.weight for m in model.modules() if type(m).__name__ == "RMSNorm"]
    assert sum(not torch.equal(a, b) for a, b in zip(norms_before, norms_after)) == 4
    torch.testing.assert_close(logits(model), ref, rtol=0, atol=1e-10)


def test_a_post_norm_model_keeps_its_function():
    """A post-norm's output is also the residual stream: its fold would change the model,
    so it is undone (the folds into the FFN's up and attention's values stay)."""
    model = llama_like("post").double()
    ref = logits(model)
    scaled = apply_awq(model, CALIBRATE, convertible_linears(model), 32, clip=False)
    assert scaled == 2 * 2  # down and out projections
    torch.testing.assert_close(logits(model), ref, rtol=0, atol=1e-10)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_awq_int4_is_closer_to_fp32_than_rtn(seed):
    model = llama_like(seed=seed)
    ref = logits(model)
    rtn = logits(quantize_model(copy.deepcopy(model), "int4"))
    awq_model = quantize_model(copy.deepcopy(model), "int4", calibrate=CALIBRATE)
    awq = logits(awq_model)
    assert isinstance(awq_model.layers[0].ffn.down_proj, Int4Linear)

    def error(out: torch.Tensor) -> float:
        return float((out - ref).pow(2).mean().sqrt())

    assert error(awq) < 0.8 * error(rtn)


def test_the_scale_search_never_loses_to_rtn_on_its_inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 64, generator=g)
    x[:, [3, 40]] *= 30.0
    w = torch.randn(32, 64, generator=g)
    s = awq_scales([w], x, x.abs().mean(0), 32)
    rtn = dequantize_groups(*quantize_groups(w, 32))
    awq = dequantize_groups(*quantize_groups(w * s, 32)) / s
    ref = x @ w.T
    assert float((x @ awq.T - ref).norm()) < 0.7 * float((x @ rtn.T - ref).norm())


def test_clipping_only_shrinks_ranges_and_never_raises_the_error():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(64, 64, generator=g), torch.randn(32, 64, generator=g)
    w[0, 0] = 8.0  # one far weight that meets small inputs: clipping its group pays
    x[:, 0] *= 0.01
    clipped = clip_weight(w, x, 32)
    assert bool((clipped.abs() <= w.abs() + 1e-6).all())
    assert float(clipped[0, 0]) < 8.0

    def error(weight: torch.Tensor) -> float:
        rounded = dequantize_groups(*quantize_groups(weight, 32))
        return float((x @ rounded.T - x @ w.T).norm())

    assert error(clipped) <= error(w) + 1e-4


def test_calibrated_int4_state_round_trips():
    model = quantize_model(llama_like(), "int4", calibrate=CALIBRATE)
    fresh = quantize_model(llama_like(seed=5), "int4")
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(logits(fresh), logits(model), rtol=0, atol=0)
