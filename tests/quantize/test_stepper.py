"""``CpuStepper`` decodes exactly like ``EncoderDecoder``'s own stepping (fp64, greedy and beam)."""

from __future__ import annotations

import pytest
import torch

from attnkit.decoding import beam_search, greedy_search
from attnkit.models import EncoderDecoder, TransformerConfig
from attnkit.quantize import CpuStepper, quantize_model


def tiny(norm: str = "post") -> EncoderDecoder:
    cfg = TransformerConfig.from_preset(
        "small", d_model=32, num_heads=4, d_ff=64, num_encoder_layers=2, num_decoder_layers=2,
        src_vocab_size=24, tgt_vocab_size=24, dropout=0.0, norm_position=norm,
        share_embeddings="none",
    )  # fmt: skip
    torch.manual_seed(0)
    model = EncoderDecoder(cfg).double().eval()
    with torch.no_grad():
        model.output_proj.weight[model.eos_id] *= 2.0  # some outputs end early
    return model


def source() -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    src = torch.randint(3, 24, (5, 7), generator=g)
    src[2, 4:] = 0
    return src


def nbest(result) -> list[list[list[int]]]:
    return [[h.tokens for h in hyps] for hyps in result.nbest]


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_same_outputs_as_the_model(norm, search):
    model, src = tiny(norm), source()
    if search == "greedy":
        run = lambda m: greedy_search(m, src, max_len=9)  # noqa: E731
    else:
        run = lambda m: beam_search(m, src, beam_size=3, nbest=3, max_len=9)  # noqa: E731
    ref, out = run(model), run(CpuStepper(model))
    assert nbest(out) == nbest(ref)
    assert out.scores == pytest.approx(ref.scores, abs=1e-9)


def test_general_reorder_after_beam_expansion():
    model, src = tiny(), source()
    stepper = CpuStepper(model)
    state = stepper.start(src, max_steps=4)
    state = state.reorder(torch.arange(5).repeat_interleave(2))  # shared source side
    assert state.group == 2
    logits, state = stepper.step(torch.ones(10, dtype=torch.long), state)
    state = state.reorder(torch.tensor([1, 0, 3, 2, 4, 5, 9, 8, 6, 7]))  # rows change sentence
    assert state.group == 1 and state.cross_k[0].size(0) == 10
    again, _ = stepper.step(torch.ones(10, dtype=torch.long), state)
    # Rows 8 and 9 now continue sentence 3 and 4's rows; each matches its sentence's decode.
    ref = CpuStepper(model)
    s2 = ref.start(src[[0, 0, 1, 1, 2, 2, 4, 4, 3, 3]], max_steps=4)
    ref.step(torch.ones(10, dtype=torch.long), s2)
    expect, _ = ref.step(torch.ones(10, dtype=torch.long), s2)
    torch.testing.assert_close(again, expect)


def test_quantized_model_decodes():
    model = quantize_model(tiny().float(), "int8")
    out = beam_search(CpuStepper(model), source(), beam_size=2, max_len=6)
    assert len(out.tokens) == 5


def test_capacity_overflow_is_an_error():
    stepper = CpuStepper(tiny())
    state = stepper.start(source(), max_steps=1)
    stepper.step(torch.ones(5, dtype=torch.long), state)
    with pytest.raises(ValueError, match="capacity"):
        stepper.step(torch.ones(5, dtype=torch.long), state)
