"""``Int4Linear`` and ``quantize_model(..., "int4")``: the kernel against its own
dequantised weights, the round trip, and small random models against fp32."""

from __future__ import annotations

import copy
import platform

import pytest
import torch

from attnkit.errors import UsageError
from attnkit.kernels import torch_ops
from attnkit.models import EncoderDecoder, TransformerConfig
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.quantize import Int4Linear, Int8WeightOnlyLinear, model_bytes, quantize_model
from attnkit.quantize.int4 import (
    GROUP_ENV,
    INT4_REL_ERROR,
    dequantize_groups,
    pack_nibbles,
    quantize_groups,
    unpack_nibbles,
)
from attnkit.quantize.model import _convert

# Documented model tolerance (README, precisions): max |logit error| <= 0.25 x max |logit|
# and the fp32 argmax kept at >= 80% of positions, on these random models at the default
# group (32; 64 measured alike; over 3 seeds: decoder-only 0.044-0.046 and 100%;
# encoder-decoder, whose random logits are nearly flat, 0.12-0.16 and 86-95%).
MODEL_REL_ERROR = 0.25
MODEL_TOP1 = 0.8


def test_the_kernel_exists_on_x86():
    """CI is x86 with torch 2.13: int4 must run there, never skip silently."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert torch_ops.int4_unavailable() == ""


@pytest.mark.parametrize("group", [32, 64, 128])
def test_linear_matches_its_dequantised_weights(group):
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(48, 256, generator=g), torch.randn(48, generator=g)
    x = torch.randn(5, 256, generator=g)
    lin = Int4Linear(w, b, group_size=group)
    y = lin(x)
    # The kernel multiplies bf16 inputs by exactly ``lin.weight`` (bf16 scales and zeros).
    ref = x.to(torch.bfloat16).float() @ lin.weight.T + b
    assert float((y - ref).abs().max() / ref.abs().max()) < 1e-2
    exact = x @ w.T + b
    err = float((y - exact).abs().max() / exact.abs().max())
    assert 1e-3 < err < INT4_REL_ERROR  # quantised, within the documented bound


def test_relu_is_fused_and_batches_keep_their_shape():
    w = torch.randn(32, 64)
    lin = Int4Linear(w, None, group_size=32, activation="relu")
    x = torch.randn(2, 3, 64)
    y = lin(x)
    assert y.shape == (2, 3, 32) and float(y.min()) >= 0
    torch.testing.assert_close(y[1], lin(x[1]))  # rows are independent


def test_quantise_dequantise_quantise_is_stable():
    w = torch.randn(64, 192) * torch.logspace(-2, 1, 192)  # groups of very different ranges
    q, scale, zero = quantize_groups(w, 64)
    assert int(q.max()) <= 15 and q.dtype == torch.uint8
    again = quantize_groups(dequantize_groups(q, scale, zero), 64)
    assert torch.equal(again[0], q)
    assert torch.equal(again[1], scale) and torch.equal(again[2], zero)


def test_constant_groups_do_not_divide_by_zero():
    q, scale, zero = quantize_groups(torch.full((16, 32), 0.25), 32)
    torch.testing.assert_close(dequantize_groups(q, scale, zero), torch.full((16, 32), 0.25))


def test_nibbles_round_trip():
    q = torch.randint(0, 16, (16, 64), dtype=torch.uint8)
    assert pack_nibbles(q).shape == (16, 32)
    assert torch.equal(unpack_nibbles(pack_nibbles(q)), q)


def test_state_dict_round_trip_repacks_for_the_kernel():
    a = Int4Linear(torch.randn(32, 128), torch.randn(32))
    b = Int4Linear(torch.zeros(32, 128), torch.zeros(32))
    b.load_state_dict(a.state_dict())
    x = torch.randn(3, 128)
    assert torch.equal(a(x), b(x))
    assert set(a.state_dict()) == {"weight_int4", "weight_scale", "weight_zero", "bias"}
    w = torch.randn(48, 128)
    expected = quantize_groups(w, 32)
    for got, want in zip(Int4Linear(w, group_size=32).unpacked(), expected, strict=True):
        assert torch.equal(got, want)  # read back exactly from the kernel's layout


def test_given_codes_keep_scales_bf16_cannot_hold():
    """``from_codes`` (a GGUF file's blocks): the codes as given, fp16 scales and exact
    zeros kept beside the kernel's bf16 copy, so state_dict and weight are exact."""
    torch.manual_seed(0)
    q = torch.randint(0, 16, (32, 64), dtype=torch.uint8)
    scale = torch.rand(32, 2).half().float() / 50  # fp16 values: bf16 rounds most
    zero = 8 * scale + torch.randn(32, 2).half().float() / 10
    linear = Int4Linear.from_codes(q, scale, zero)
    got_q, got_scale, got_zero = linear.unpacked()
    assert torch.equal(got_q, q) and torch.equal(got_scale, scale) and torch.equal(got_zero, zero)
    assert torch.equal(linear.weight, dequantize_groups(q, scale, zero))
    back = Int4Linear.from_codes(q, torch.ones(32, 2), torch.zeros(32, 2))
    back.load_state_dict(linear.state_dict())
    assert torch.equal(back.unpacked()[1], scale)
    x = torch.randn(3, 64)
    reference = x @ linear.weight.t()
    assert (linear(x) - reference).abs().max() <= INT4_REL_ERROR * reference.abs().max()
    assert linear.nbytes() == 32 * 32 + 64 * 4 + 64 * 8  # codes, bf16 pairs, exact fp32 pairs
    with pytest.raises(ValueError, match="groups"):
        Int4Linear.from_codes(q, scale[:, :1].repeat(1, 3), zero[:, :1].repeat(1, 3))


def test_shapes_the_kernel_cannot_take():
    assert isinstance(
        _convert(torch.randn(50, 64), None, "int4", group_size=64), Int8WeightOnlyLinear
    )
    smaller = _convert(torch.randn(32, 96), None, "int4", group_size=64)
    assert isinstance(smaller, Int4Linear) and smaller.group_size == 32
    with pytest.raises(ValueError, match="group_size"):
        Int4Linear(torch.randn(32, 96), group_size=64)


def _decoder_only() -> DecoderOnlyLM:
    cfg = DecoderOnlyConfig.from_preset(
        "small", d_model=128, num_heads=4, d_ff=384, num_layers=2, max_len=64,
        vocab_size=512, dropout=0.0, norm="rmsnorm", activation="swiglu", positions="rotary",
    )  # fmt: skip
    torch.manual_seed(0)
    return DecoderOnlyLM(cfg).eval()


def _encoder_decoder() -> EncoderDecoder:
    cfg = TransformerConfig.from_preset(
        "small", d_model=64, num_heads=4, d_ff=256, num_encoder_layers=2, num_decoder_layers=2,
        src_vocab_size=512, tgt_vocab_size=512, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    return EncoderDecoder(cfg).eval()


@pytest.mark.parametrize("kind", ["decoder_only", "encoder_decoder"])
def test_model_logits_within_the_documented_tolerance(kind):
    model = _decoder_only() if kind == "decoder_only" else _encoder_decoder()
    g = torch.Generator().manual_seed(1)
    inputs = (torch.randint(3, 512, (3, 12), generator=g),)
    if kind == "encoder_decoder":
        inputs = (*inputs, torch.randint(3, 512, (3, 7), generator=g))
    with torch.no_grad():
        ref = model(*inputs).logits
        int4 = quantize_model(copy.deepcopy(model), "int4")
        out = int4(*inputs).logits
    assert sum(isinstance(m, Int4Linear) for m in int4.modules()) >= 8
    rel = float((out - ref).abs().max() / ref.abs().max())
    assert 1e-4 < rel < MODEL_REL_ERROR
    assert float((out.argmax(-1) == ref.argmax(-1)).float().mean()) >= MODEL_TOP1
    # Smaller than int8 weights (token embeddings are int8 rows in both).
    assert model_bytes(int4) < 0.85 * model_bytes(quantize_model(copy.deepcopy(model), "int8w"))


def test_a_decoder_only_model_decodes_on_its_cache():
    model = quantize_model(_decoder_only(), "int4")
    prompt = torch.randint(3, 512, (2, 4), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        state = model.start(prompt, max_steps=2)
        logits, _ = model.step(prompt[:, -1], state)
        full = model(prompt).logits[:, -1]
    torch.testing.assert_close(logits, full, atol=2e-2, rtol=2e-2)  # bf16 activations


def test_group_size_from_the_environment(monkeypatch):
    monkeypatch.setenv(GROUP_ENV, "64")
    model = quantize_model(_decoder_only(), "int4")
    assert {m.group_size for m in model.modules() if isinstance(m, Int4Linear)} == {64}
    monkeypatch.setenv(GROUP_ENV, "48")
    with pytest.raises(ValueError, match=GROUP_ENV):
        quantize_model(_decoder_only(), "int4")
    with pytest.raises(ValueError, match="group_size"):
        quantize_model(_decoder_only(), "int4", group_size=256)


def test_without_the_kernel_the_option_fails_in_one_line(monkeypatch):
    from attnkit.inference.plan import CheckpointInfo, Machine, Options, make_plan

    monkeypatch.setattr(torch_ops, "int4_unavailable", lambda: "torch 9 has no aten.x")
    with pytest.raises(ValueError, match="precision int4: torch 9 has no aten.x"):
        quantize_model(_decoder_only(), "int4")
    info = CheckpointInfo(kind="causal_lm", static_cache=True, decoder_only_lm=True)
    with pytest.raises(UsageError, match="--precision int4: torch 9 has no aten.x") as caught:
        make_plan(info, Machine(device="cpu", threads=1), Options(precision="int4"))
    assert "\n" not in str(caught.value)
