"""``read_stored``: a packed linear's stored tensors and bias, or the keys that do not fit."""

from __future__ import annotations

import torch

from attnkit.quantize.stored_form import read_stored


def _read(state: dict, has_bias: bool):
    missing: list[str] = []
    unexpected: list[str] = []
    out = read_stored(state, "p.", ("a", "b"), has_bias=has_bias, missing=missing,
                      unexpected=unexpected)  # fmt: skip
    return out, missing, unexpected


def test_every_tensor_and_the_bias_come_back_in_order():
    a, b, bias = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    out, missing, unexpected = _read({"p.b": b, "p.a": a, "p.bias": bias}, has_bias=True)
    assert out is not None and not missing and not unexpected
    (first, second), got = out
    assert first is a and second is b and got is bias
    out, _, _ = _read({"p.a": a, "p.b": b}, has_bias=False)
    assert out is not None and out[1] is None


def test_what_does_not_fit_is_reported_as_load_state_dict_does():
    assert _read({"p.a": torch.zeros(1)}, has_bias=False)[1:] == (["p.b"], [])
    both = {"p.a": torch.zeros(1), "p.b": torch.zeros(1)}
    assert _read(both, has_bias=True)[1:] == (["p.bias"], [])
    out, missing, unexpected = _read({**both, "p.bias": torch.zeros(1)}, has_bias=False)
    assert out is None and (missing, unexpected) == ([], ["p.bias"])
