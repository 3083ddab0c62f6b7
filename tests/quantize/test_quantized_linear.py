"""Packed and int8 linears against ``nn.Linear``: accuracy bounds, fused ReLU, state round trip."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnkit.quantize import Int8Linear, PackedLinear, quantize_rows
from attnkit.quantize.linear import INT8_REL_ERROR


def linear(k: int = 64, n: int = 48) -> nn.Linear:
    lin = nn.Linear(k, n)
    nn.init.xavier_uniform_(lin.weight)
    nn.init.normal_(lin.bias, std=0.02)
    return lin


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float((a - ref).abs().max().detach() / ref.abs().max().detach())


@pytest.mark.parametrize("shape", [(5, 64), (2, 3, 64), (1, 64)])
def test_packed_fp32_matches_linear(shape):
    lin, x = linear(), torch.randn(*shape)
    packed = PackedLinear.from_linear(lin)
    assert packed(x).shape == lin(x).shape
    torch.testing.assert_close(packed(x), lin(x), atol=1e-5, rtol=1e-5)


def test_packed_bf16_within_bf16_rounding():
    lin, x = linear(), torch.randn(7, 64)
    out = PackedLinear.from_linear(lin, precision="bf16")(x)
    assert out.dtype == torch.float32
    assert rel_err(out, lin(x)) < 2e-2  # bf16 keeps 8 bits of mantissa


@pytest.mark.parametrize("x_kind", ["layernorm", "relu"])
def test_int8_within_documented_bound(x_kind):
    lin = linear(256, 128)
    x = torch.randn(16, 256)
    x = torch.relu(x) if x_kind == "relu" else x
    with torch.no_grad():
        assert rel_err(Int8Linear.from_linear(lin)(x), lin(x)) < INT8_REL_ERROR


def test_fused_relu():
    lin, x = linear(), torch.randn(6, 64)
    with torch.no_grad():
        ref = torch.relu(lin(x))
        torch.testing.assert_close(
            PackedLinear.from_linear(lin, activation="relu")(x), ref, atol=1e-5, rtol=1e-5
        )
        out = Int8Linear.from_linear(lin, activation="relu")(x)
    assert (out >= 0).all() and rel_err(out, ref) < INT8_REL_ERROR


def test_quantize_rows_is_symmetric_per_row():
    w = torch.randn(4, 10)
    q, scale = quantize_rows(w)
    assert q.dtype == torch.int8 and q.abs().max() <= 127
    assert (q.float() * scale[:, None] - w).abs().max() <= scale.max() / 2 + 1e-6


@pytest.mark.parametrize(
    "make", [PackedLinear.from_linear, lambda lin: PackedLinear.from_linear(lin, precision="bf16"),
             Int8Linear.from_linear],
    ids=["fp32", "bf16", "int8"],
)  # fmt: skip
def test_state_round_trip(make):
    src, other = make(linear()), make(linear())
    other.load_state_dict(src.state_dict())
    x = torch.randn(3, 64)
    assert torch.equal(src(x), other(x))


def test_int8_state_holds_int8_weights_and_scales():
    state = Int8Linear.from_linear(linear()).state_dict()
    assert set(state) == {"weight_int8", "weight_scale", "bias"}
    assert state["weight_int8"].dtype == torch.int8 and state["weight_scale"].shape == (48,)


def test_missing_keys_are_reported():
    with pytest.raises(RuntimeError, match="weight_int8"):
        Int8Linear.from_linear(linear()).load_state_dict({"bias": torch.zeros(48)})


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="precision"):
        PackedLinear.from_linear(linear(), precision="fp16")
    with pytest.raises(ValueError, match="activation"):
        Int8Linear.from_linear(linear(), activation="gelu")


def test_int8_weight_only_keeps_bf16_accuracy_on_outlier_activations():
    """One activation channel 100x the others: dynamic int8 (one scale per call) loses the
    small channels; int8 weights with bf16 activations do not."""
    from attnkit.quantize import Int8Linear, Int8WeightOnlyLinear

    torch.manual_seed(0)
    w, b = torch.randn(96, 64) / 8, torch.randn(96) / 10
    x = torch.randn(5, 64)
    x[:, 3] *= 100.0
    ref = torch.nn.functional.linear(x, w, b)
    err = lambda y: float((y - ref).abs().max() / ref.abs().max())  # noqa: E731
    weight_only = Int8WeightOnlyLinear(w, b)
    assert err(weight_only(x)) < 2e-2
    assert err(weight_only(x)) < err(Int8Linear(w, b)(x))
    relu = Int8WeightOnlyLinear(w, b, activation="relu")
    torch.testing.assert_close(relu(x), torch.relu(weight_only(x)))
    assert weight_only(x[None]).shape == (1, 5, 96)  # any leading dims


def test_int8_weight_only_state_round_trip_and_int8_compatible_keys():
    from attnkit.quantize import Int8Linear, Int8WeightOnlyLinear

    w = torch.randn(32, 16)
    a, fresh = (
        Int8WeightOnlyLinear(w, torch.randn(32)),
        Int8WeightOnlyLinear(torch.zeros(32, 16), torch.zeros(32)),
    )
    fresh.load_state_dict(a.state_dict())
    x = torch.randn(4, 16)
    assert torch.equal(a(x), fresh(x))
    assert set(a.state_dict()) == set(Int8Linear(w, torch.zeros(32)).state_dict())
