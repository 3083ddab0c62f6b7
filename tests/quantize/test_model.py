"""``quantize_model`` on a small random ``EncoderDecoder``: outputs, memory, state round trip."""

from __future__ import annotations

import copy

import pytest
import torch

from attnkit.decoding import greedy_search
from attnkit.models import EncoderDecoder, TransformerConfig
from attnkit.quantize import SplitCrossAttention, model_bytes, quantize_model


def small(**kw) -> EncoderDecoder:
    cfg = TransformerConfig.from_preset(
        "small", d_model=64, num_heads=4, d_ff=256, num_encoder_layers=2, num_decoder_layers=2,
        src_vocab_size=500, tgt_vocab_size=500, dropout=0.0, **kw,
    )  # fmt: skip
    torch.manual_seed(0)
    return EncoderDecoder(cfg).eval()


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 500, (3, 9), generator=g)
    tgt = torch.randint(3, 500, (3, 6), generator=g)
    src[1, 6:] = 0  # padding
    return src, tgt


# Max |logit error| relative to max |logit| (the int8 error compounds over layers).
BOUNDS = {"fp32": 1e-5, "bf16": 3e-2, "int8": 6e-2}


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_logits_close(precision, norm, batch):
    model = small(norm_position=norm)
    with torch.no_grad():
        ref = model(*batch).logits
        out = quantize_model(copy.deepcopy(model), precision)(*batch).logits
    assert float((out - ref).abs().max() / ref.abs().max()) < BOUNDS[precision]


def test_cross_attention_is_split_and_decoding_works(batch):
    model = quantize_model(small(), "int8")
    cross = model.decoder.layers[0].cross_attn
    assert isinstance(cross, SplitCrossAttention) and not hasattr(cross, "qkv_proj")
    out = greedy_search(model, batch[0], max_len=5)  # the model's own static-cache path
    assert len(out.tokens) == 3


# bf16 keeps a tied embedding twice (bf16 rows for lookups, a packed bf16 output
# projection), which at this tiny size is most of the model; int8 is the target.
@pytest.mark.parametrize("precision, ratio", [("bf16", 0.7), ("int8", 0.5)])
def test_memory_at_most_ratio_of_fp32(precision, ratio):
    model = small()
    fp32 = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    assert model_bytes(quantize_model(copy.deepcopy(model), precision)) <= ratio * fp32


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_state_round_trip(precision, batch):
    model = quantize_model(small(), precision)
    fresh = quantize_model(small(share_embeddings="all"), precision)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(model(*batch).logits, fresh(*batch).logits)


def test_bad_precision_names_the_field():
    with pytest.raises(ValueError, match="precision"):
        quantize_model(small(), "int4")
