"""Every option of the shared attention-stack config takes effect in every family.

``attention_score``, ``positions`` and ``norm_position`` are built by
``attnkit.models.builders`` for the encoder-decoder, the decoder-only and the
encoder-only model alike: each test checks the modules and that the outputs
change.
"""

from __future__ import annotations

import pytest
import torch

from attnkit.attention import CrossAttention, GeneralScore, MultiHeadAttention
from attnkit.blocks import Residual
from attnkit.models import (
    DecoderOnlyConfig,
    DecoderOnlyLM,
    EncoderDecoder,
    EncoderOnlyConfig,
    EncoderOnlyModel,
    TransformerConfig,
)
from attnkit.positions import LearnedPositions, NoPositions, SinusoidalPositions

SHAPE = {"d_model": 16, "num_heads": 2, "d_ff": 32, "dropout": 0.0, "max_len": 32}
FAMILIES = {
    "transformer": (TransformerConfig, EncoderDecoder, {"num_encoder_layers": 1,
                    "num_decoder_layers": 1, "src_vocab_size": 30, "tgt_vocab_size": 30}),
    "decoder_only": (DecoderOnlyConfig, DecoderOnlyLM, {"num_layers": 2, "vocab_size": 30}),
    "encoder_only": (EncoderOnlyConfig, EncoderOnlyModel, {"num_layers": 2, "vocab_size": 30,
                     "mask_id": 29, "num_labels": 0}),
}  # fmt: skip


def build(family: str, **options):
    config_cls, model_cls, fields = FAMILIES[family]
    torch.manual_seed(0)
    return model_cls(config_cls.from_preset("small", **SHAPE, **fields, **options)).eval()


def output(model) -> torch.Tensor:
    ids = torch.randint(3, 29, (2, 7), generator=torch.Generator().manual_seed(1))
    if isinstance(model, EncoderDecoder):
        return model(ids, ids).logits
    if isinstance(model, EncoderOnlyModel):
        return model(ids).mlm_logits
    return model(ids).logits


@pytest.mark.parametrize("family", list(FAMILIES))
def test_attention_score_takes_effect(family):
    general = build(family, attention_score="general")
    kinds = MultiHeadAttention | CrossAttention
    attentions = [m for m in general.modules() if isinstance(m, kinds)]
    assert attentions and all(isinstance(m.score, GeneralScore) for m in attentions)
    assert all(m.score is None for m in build(family).modules() if isinstance(m, kinds))
    assert not torch.allclose(output(general), output(build(family)))


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize(
    ("positions", "absolute", "relative"),
    [("sinusoidal", SinusoidalPositions, False), ("learned", LearnedPositions, False),
     ("relative", NoPositions, True), ("learned+relative", LearnedPositions, True)],
)  # fmt: skip
def test_positions_take_effect(family, positions, absolute, relative):
    model = build(family, positions=positions)
    embeds = [m for name, m in model.named_modules() if name.endswith("embed")]
    assert embeds and all(isinstance(e.positions, absolute) for e in embeds)
    self_attns = [m for name, m in model.named_modules() if name.endswith("self_attn")]
    assert self_attns and all((m.relative_positions is not None) == relative for m in self_attns)
    cross = [m for name, m in model.named_modules() if name.endswith("cross_attn")]
    assert all(isinstance(m, CrossAttention) for m in cross)  # no position terms there


@pytest.mark.parametrize("family", list(FAMILIES))
def test_norm_position_takes_effect(family):
    for where in ("post", "pre"):
        model = build(family, norm_position=where)
        residuals = [m for m in model.modules() if isinstance(m, Residual)]
        assert residuals and all(r.pre_norm == (where == "pre") for r in residuals)
        final_norms = [m for name, m in model.named_modules() if name.endswith("final_norm")]
        assert all((m is not None) == (where == "pre") for m in final_norms)
    assert not torch.allclose(output(build(family, norm_position="pre")),
                              output(build(family, norm_position="post")))  # fmt: skip


@pytest.mark.parametrize("family", list(FAMILIES))
def test_one_init_routine_for_every_family(family):
    model = build(family)
    biases = [
        m.bias for m in model.modules() if isinstance(m, torch.nn.Linear) and m.bias is not None
    ]
    assert biases and all(torch.count_nonzero(b) == 0 for b in biases)  # zero biases everywhere
