"""``quantize_model`` on a small random ``EncoderDecoder``: outputs, memory, state round trip."""

from __future__ import annotations

import copy

import pytest
import torch

from attnkit.attention import CrossAttention
from attnkit.decoding import greedy_search
from attnkit.models import EncoderDecoder, TransformerConfig
from attnkit.quantize import Int8Linear, model_bytes, quantize_model, quantize_rows


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
BOUNDS = {"fp32": 1e-5, "bf16": 3e-2, "int8": 6e-2, "int8w": 3e-2}


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8", "int8w"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_logits_close(precision, norm, batch):
    model = small(norm_position=norm)
    with torch.no_grad():
        ref = model(*batch).logits
        out = quantize_model(copy.deepcopy(model), precision)(*batch).logits
    assert float((out - ref).abs().max() / ref.abs().max()) < BOUNDS[precision]


def test_cross_attention_projections_are_replaced_and_decoding_works(batch):
    model = quantize_model(small(), "int8")
    cross = model.decoder.layers[0].cross_attn
    assert type(cross) is CrossAttention  # its modules are replaced, its class stays
    assert isinstance(cross.q_proj, Int8Linear) and isinstance(cross.kv_proj, Int8Linear)
    assert not hasattr(model, "quantized_precision")
    out = greedy_search(model, batch[0], max_len=5)  # the model's own static-cache path
    assert len(out.tokens) == 3


# bf16 keeps a tied embedding twice (bf16 rows for lookups, a packed bf16 output
# projection), which at this tiny size is most of the model; int8 is the target.
@pytest.mark.parametrize("precision, ratio", [("bf16", 0.7), ("int8", 0.5), ("int8w", 0.5)])
def test_memory_at_most_ratio_of_fp32(precision, ratio):
    model = small()
    fp32 = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    assert model_bytes(quantize_model(copy.deepcopy(model), precision)) <= ratio * fp32


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8", "int8w", "int4"])
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
        quantize_model(small(), "int3")


def test_fp32_decodes_the_reference_tokens(batch):
    # Packed fp32 sums the same products in another order: the same searches
    # on the same weights must pick the same tokens (greedy and beam 4).
    from attnkit.decoding import beam_search
    from attnkit.inference import stepper_for

    model = small()
    packed = quantize_model(copy.deepcopy(model), "fp32")
    src = batch[0]
    for search in (lambda m: greedy_search(m, src, max_len=12),
                   lambda m: beam_search(m, src, beam_size=4, max_len=12)):  # fmt: skip
        assert search(stepper_for(packed)).tokens == search(stepper_for(model, "reference")).tokens


IMAGES = ("vit", "swin")


def _families() -> dict[str, torch.nn.Module]:
    from attnkit.models import FAMILIES
    from attnkit.models.registry import config_from_preset

    sizes = dict(d_model=32, num_heads=4, d_ff=64, dropout=0.0)
    overrides = {
        "transformer": dict(
            sizes,
            src_vocab_size=50,
            tgt_vocab_size=50,
            num_kv_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
        ),
        "decoder_only": dict(
            sizes,
            vocab_size=50,
            num_layers=2,
            ffn="moe",
            num_experts=2,
            positions="rotary",
            norm="rmsnorm",
            activation="swiglu",
        ),
        "encoder_only": dict(
            sizes, vocab_size=51, mask_id=50, num_layers=1, attention_score="general"
        ),
        "rnn": dict(src_vocab_size=50, tgt_vocab_size=50),
        "vit": dict(sizes, num_layers=1, image_size=8, patch_size=4, channels=1, num_classes=3),
        "swin": dict(
            image_size=8,
            patch_size=2,
            channels=1,
            num_classes=3,
            embed_dim=16,
            depths=(1, 1),
            num_heads=(2, 2),
            window_size=2,
            dropout=0.0,
        ),
    }
    assert set(overrides) == set(FAMILIES)  # a new family is tested here too
    torch.manual_seed(0)
    models = {
        name: FAMILIES[name]
        .model_class(config_from_preset(name, "digits" if name in IMAGES else "small", **kw))
        .eval()
        for name, kw in overrides.items()
    }
    for name in IMAGES:  # a zero head would hide any difference
        torch.nn.init.normal_(models[name].head.weight)
    return models


def _inputs(name: str) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    if name in IMAGES:
        return (torch.rand(2, 1, 8, 8, generator=g),)
    ids = torch.randint(3, 50, (2, 7), generator=g)
    return (ids, ids[:, :5]) if name in ("transformer", "rnn") else (ids,)


def _output(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    out = model(*inputs)
    if isinstance(out, torch.Tensor):
        return out
    return out.mlm_logits if hasattr(out, "mlm_logits") else out.logits


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8", "int8w", "int4"])
def test_every_family_converts_and_keeps_its_outputs(precision):
    from attnkit.attention.scores import Score
    from attnkit.blocks.moe import MoEFeedForward

    for name, model in _families().items():
        inputs = _inputs(name)
        with torch.no_grad():
            ref = _output(model, inputs)
            quantize_model(model, precision)
            out = _output(model, inputs)
        bound = {"fp32": 1e-4, "bf16": 5e-2, "int8": 1e-1, "int8w": 5e-2, "int4": 0.25}[precision]
        assert float((out - ref).abs().max() / ref.abs().max()) < bound, name
        kept = {id(m) for o in model.modules() if isinstance(o, Score) for m in o.modules()}
        kept |= {id(o.router) for o in model.modules() if isinstance(o, MoEFeedForward)}
        plain = [n for n, m in model.named_modules()
                 if type(m) is torch.nn.Linear and id(m) not in kept]  # fmt: skip
        assert plain == [], (name, plain)
        assert kept or name not in ("decoder_only", "encoder_only")  # routers, scores: float


def test_a_gpu_model_is_refused_by_name():
    if not torch.cuda.is_available():
        model = small()
        model.qkv_probe = torch.nn.Parameter(torch.zeros(1, device="meta"))
        with pytest.raises(ValueError, match="precision: .*CPU"):
            quantize_model(model, "int8")
    else:  # pragma: no cover - the GPU runbook
        with pytest.raises(ValueError, match="precision: .*CPU"):
            quantize_model(small().cuda(), "int8")


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8", "int8w"])
def test_a_quantized_decoder_only_model_decodes_on_its_cache(precision):
    """``DecoderOnlyLM.start`` sizes its cache from a float parameter, not the
    (quantized) embedding: each step's logits match a full forward of the same
    quantized model over the prefix. int8 only to its quantisation error: its
    activations are quantised per call (one scale for all rows), so a step of
    one row and a forward of all rows round differently."""
    model = _families()["decoder_only"]
    prompt = _inputs("decoder_only")[0][:, :4]
    quantize_model(model, precision)
    with torch.no_grad():
        state = model.start(prompt, max_steps=3)
        tokens = prompt
        for _ in range(3):
            logits, state = model.step(tokens[:, -1], state)
            full = model(tokens).logits[:, -1]
            if precision == "int8":
                assert float((logits - full).abs().max() / full.abs().max()) < 0.1
            else:
                torch.testing.assert_close(logits, full, atol=1e-4, rtol=1e-4)
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)


def test_int8_token_embedding_is_quantize_rows_of_the_float_one():
    model = small()
    weight = model.src_embed.tokens.weight.detach().clone()
    weight[5] = 0.0  # a zero row: the scale's floor keeps it finite
    with torch.no_grad():
        model.src_embed.tokens.weight.copy_(weight)
    embedding = quantize_model(model, "int8").src_embed.tokens
    q, scale = quantize_rows(weight)
    assert torch.equal(embedding.weight_int8, q) and torch.equal(embedding.row_scale, scale)
    assert torch.isfinite(embedding(torch.tensor([[5, 6]]))).all()


@pytest.mark.parametrize("width", [4, 12, 24])
def test_int8w_on_a_width_the_kernel_cannot_take_is_still_int8(width):
    """torch's weight-only int8 kernel ends the process on input widths that are not a
    multiple of 16; such a linear gets the per-call int8 kernel instead, same weights."""
    from attnkit.quantize.model import INT8PACK_K_MULTIPLE, _convert

    torch.manual_seed(0)
    linear = torch.nn.Linear(width, 8)
    x = torch.randn(3, width)
    converted = _convert(linear.weight, linear.bias, "int8w")
    assert width % INT8PACK_K_MULTIPLE and type(converted).__name__ == "Int8Linear"
    with torch.no_grad():
        error = (converted(x) - linear(x)).abs().max() / linear(x).abs().max()
    assert float(error) < 0.1
