"""--precision fp32 packs the linears for oneDNN only where that is the faster here."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnkit.errors import UsageError
from attnkit.kernels import fp32_choice, onednn_linear
from attnkit.models import EncoderDecoder, TransformerConfig
from attnkit.quantize import PackedLinear, quantize_model
from attnkit.quantize.model import convertible_linears

pytestmark = pytest.mark.skipif(not onednn_linear.available(), reason="torch without oneDNN")


@pytest.fixture(autouse=True)
def _auto(monkeypatch):
    monkeypatch.delenv(fp32_choice.ENV, raising=False)  # conftest forces "packed"


def tiny_transformer() -> nn.Module:
    cfg = TransformerConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1, num_decoder_layers=1,
        src_vocab_size=40, tgt_vocab_size=40, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    return EncoderDecoder(cfg).eval()


def kinds(model: nn.Module) -> set[str]:
    return {type(m).__name__ for m in model.modules() if isinstance(m, nn.Linear | PackedLinear)}


@pytest.mark.parametrize("packed", [True, False])
def test_either_choice_gives_the_float_models_logits(packed):
    model = tiny_transformer()
    src = torch.randint(4, 40, (3, 7))
    tgt = torch.randint(4, 40, (3, 5))
    with torch.no_grad():
        expected = model(src, tgt).logits
        quantize_model(model, "fp32", pack_fp32=packed)
        got = model(src, tgt).logits
    assert kinds(model) == ({"PackedLinear"} if packed else {"Linear"})
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_choose_measures_once_then_reads_the_cache(tmp_path, monkeypatch):
    model = tiny_transformer()
    calls = []
    real = fp32_choice.measure
    monkeypatch.setattr(fp32_choice, "measure", lambda ls, r: calls.append(r) or real(ls, r))
    first = fp32_choice.choose(model, rows=4, root=tmp_path)
    assert calls == [4] and first.speedup is not None and first.speedup > 0
    assert "measured in" in first.describe()
    again = fp32_choice.choose(model, rows=4, root=tmp_path)
    assert calls == [4] and again.packed == first.packed and again.speedup is None
    fp32_choice.choose(model, rows=1, root=tmp_path)  # another row count: measured anew
    assert calls == [4, 1]
    # measuring changed nothing in the model
    assert all(type(m) is nn.Linear for m in convertible_linears(model))


@pytest.mark.parametrize("winner", ["packed", "plain"])
def test_the_faster_pass_wins(monkeypatch, winner):
    times = iter([2.0, 1.0] if winner == "packed" else [1.0, 2.0])  # plain's, then packed's
    monkeypatch.setattr(fp32_choice, "best_time", lambda one_pass: (one_pass(), next(times))[1])
    choice = fp32_choice.measure(convertible_linears(tiny_transformer()), rows=2)
    assert choice.packed == (winner == "packed")
    assert choice.speedup == pytest.approx(2.0 if winner == "packed" else 0.5)


def test_the_environment_forces_a_choice_and_a_wrong_value_is_refused(tmp_path, monkeypatch):
    model = tiny_transformer()
    for value, packed in (("packed", True), ("plain", False)):
        monkeypatch.setenv(fp32_choice.ENV, value)
        assert fp32_choice.choose(model, rows=1, root=tmp_path).packed is packed
    assert not (tmp_path / fp32_choice.CACHE_FILE).exists()  # nothing measured or kept
    monkeypatch.setenv(fp32_choice.ENV, "fast")
    with pytest.raises(UsageError, match="ATTNKIT_FP32_LINEARS.*'fast'"):
        fp32_choice.choose(model, rows=1, root=tmp_path)


def test_rows_below_one_are_refused():
    with pytest.raises(ValueError, match="rows"):
        fp32_choice.measure(convertible_linears(tiny_transformer()), rows=0)
