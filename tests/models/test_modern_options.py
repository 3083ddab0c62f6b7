"""The decoder's modern options, each one config string: rotary, ALiBi, RMSNorm, SwiGLU,
grouped-query attention, bias-free projections, local and linear attention, MoE.

For every option: cached decoding (growing cache, and the static cache where it
applies) equals the full forward, greedy search gives the same tokens on every
path, and the option really changed the model.
"""

from __future__ import annotations

import pytest
import torch

from attnkit.attention import KVCache, StaticKVCache
from attnkit.attention.one_query import OneQueryDecode
from attnkit.attention.recurrent_cache import RecurrentStateCache
from attnkit.blocks.moe import MoEFeedForward
from attnkit.blocks.norms import RMSNorm
from attnkit.blocks.swiglu import SwiGLU
from attnkit.decoding import StaticCacheStepper, greedy_search
from attnkit.inference import stepper_for
from attnkit.models import (
    DecoderOnlyConfig,
    DecoderOnlyLM,
    EncoderDecoder,
    EncoderOnlyConfig,
    EncoderOnlyModel,
    TransformerConfig,
)

OPTIONS = {
    "rotary": {"positions": "rotary", "rope_theta": 500.0},
    "alibi": {"positions": "alibi", "num_heads": 3, "d_model": 24},  # 3: not a power of 2
    "rmsnorm": {"norm": "rmsnorm", "norm_eps": 1e-6},
    "swiglu": {"activation": "swiglu"},
    "gqa": {"num_heads": 4, "num_kv_heads": 2},
    "mqa": {"num_heads": 4, "num_kv_heads": 1, "positions": "rotary"},
    "bias_free": {"bias": False, "tie_embeddings": False, "scale_embeddings": False},
    "local": {"attention": "local", "attention_window": 3, "global_tokens": 1},
    "linear": {"attention": "linear"},
    "moe": {"ffn": "moe", "num_experts": 3, "moe_top_k": 2},
    "llama": {"positions": "rotary", "norm": "rmsnorm", "activation": "swiglu",
              "num_heads": 4, "num_kv_heads": 2, "bias": False, "scale_embeddings": False},
}  # fmt: skip
STATIC = {"rotary", "alibi", "rmsnorm", "swiglu", "gqa", "mqa", "bias_free", "local", "moe",
          "llama"}  # fmt: skip


def lm(**options) -> DecoderOnlyLM:
    fields = {"d_model": 16, "num_heads": 2, "d_ff": 32, "num_layers": 2, "vocab_size": 30,
              "max_len": 40, "dropout": 0.0, **options}  # fmt: skip
    torch.manual_seed(0)
    return DecoderOnlyLM(DecoderOnlyConfig.from_preset("small", **fields)).double().eval()


def ids(batch: int = 2, length: int = 9) -> torch.Tensor:
    return torch.randint(3, 30, (batch, length), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", list(OPTIONS))
def test_cached_steps_equal_the_full_forward(name):
    model, x = lm(**OPTIONS[name]), ids()
    full = model(x).logits
    state = model.start(x[:, :1])
    steps = []
    for t in range(x.size(1)):
        logits, state = model.step(x[:, t], state)
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=1e-9, atol=1e-9)
    expected = RecurrentStateCache if name == "linear" else KVCache
    assert isinstance(state.cache, expected)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_greedy_tokens_are_the_same_on_the_static_and_the_reference_path(name):
    model, prompt = lm(**OPTIONS[name]), ids(3, 4)
    want = greedy_search(model, prompt, max_len_a=0.0, max_len_b=10)
    fast = StaticCacheStepper(model)
    got = greedy_search(fast, prompt, max_len_a=0.0, max_len_b=10)
    assert got.tokens == want.tokens
    assert got.scores == pytest.approx(want.scores, abs=1e-9)
    state = fast.start(prompt, max_steps=10)
    assert isinstance(state.cache, StaticKVCache) == (name in STATIC)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_the_cpu_decode_backend_gives_the_reference_tokens(name):
    model, prompt = lm(**OPTIONS[name]), ids(3, 4)
    want = greedy_search(model, prompt, max_len_a=0.0, max_len_b=10)  # REFERENCE, as built
    got = greedy_search(stepper_for(model), prompt, max_len_a=0.0, max_len_b=10)
    backends = {type(m.backend) for m in model.modules() if hasattr(m, "backend")}
    assert backends == ({OneQueryDecode} if name != "linear" else set())
    assert got.tokens == want.tokens
    assert got.scores == pytest.approx(want.scores, abs=1e-9)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_each_option_changes_the_model(name):
    base, changed = lm(), lm(**OPTIONS[name])
    x = ids()
    if base.config.d_model == changed.config.d_model:
        assert not torch.allclose(base(x).logits, changed(x).logits)
    modules = list(changed.modules())
    expect = {
        "rmsnorm": RMSNorm, "swiglu": SwiGLU, "moe": MoEFeedForward,
    }.get(name)  # fmt: skip
    if expect is not None:
        assert any(isinstance(m, expect) for m in modules)


def test_the_cache_holds_only_the_key_value_heads():
    model = lm(**OPTIONS["gqa"])
    state = model.start(ids(2, 5))
    assert state.cache.self_k.shape[2] == 2  # (L, B, h_kv, C, d): 2 kv heads of 4
    assert model.layers[0].self_attn.qkv_proj.weight.shape == (16 + 2 * 2 * 4, 16)


def test_grouped_query_attention_with_as_many_kv_heads_equals_plain_attention():
    plain = lm(num_heads=4)
    grouped = lm(num_heads=4, num_kv_heads=4)
    grouped.load_state_dict(plain.state_dict())
    x = ids()
    torch.testing.assert_close(grouped(x).logits, plain(x).logits, rtol=0, atol=0)


def test_a_window_covering_every_key_equals_dense_attention():
    dense = lm()
    local = lm(attention="local", attention_window=64)
    local.load_state_dict(dense.state_dict())
    x = ids(2, 12)
    torch.testing.assert_close(local(x).logits, dense(x).logits, rtol=1e-12, atol=1e-12)


def test_moe_reports_its_routing_and_the_report_reaches_the_output():
    model = lm(ffn="moe", num_experts=3, moe_top_k=1, moe_every=2)
    moe_layers = [m for m in model.modules() if isinstance(m, MoEFeedForward)]
    assert len(moe_layers) == 1  # every 2nd of 2 layers
    out = model(ids())
    assert out.moe is not None and out.moe.utilisation.shape == (3,)
    assert float(out.moe.utilisation.sum()) == pytest.approx(1.0)
    assert lm()(ids()).moe is None


@pytest.mark.parametrize(
    "options",
    [{"positions": "rotary"}, {"positions": "alibi"}, {"attention": "local",
     "attention_window": 3}, {"attention": "linear"}, {"ffn": "moe"}, {"num_kv_heads": 1}],
)  # fmt: skip
def test_the_options_work_in_the_other_families(options):
    torch.manual_seed(0)
    shape = {"d_model": 16, "num_heads": 2, "d_ff": 32, "dropout": 0.0, "max_len": 32}
    if options.get("attention") != "linear":  # linear attention: decoder-only and encoders
        t = TransformerConfig.from_preset("small", **shape, num_encoder_layers=1,
                                          num_decoder_layers=1, src_vocab_size=30,
                                          tgt_vocab_size=30, **options)  # fmt: skip
        model = EncoderDecoder(t).double().eval()
        src = ids(2, 7)
        full = model(src, src).logits
        state, steps = model.start(src), []
        for i in range(src.size(1)):
            logits, state = model.step(src[:, i], state)
            steps.append(logits)
        torch.testing.assert_close(torch.stack(steps, 1), full, rtol=1e-9, atol=1e-9)
    e = EncoderOnlyConfig.from_preset("small", **shape, num_layers=1, vocab_size=30,
                                      mask_id=29, num_labels=2, **options)  # fmt: skip
    assert EncoderOnlyModel(e).double()(ids()).mlm_logits.shape == (2, 9, 30)


@pytest.mark.parametrize(
    ("options", "field"),
    [({"num_kv_heads": 3}, "num_kv_heads"), ({"positions": "rotary", "d_model": 18,
      "num_heads": 2}, "d_model"), ({"positions": "alibi", "attention_score": "general"},
      "attention_score"), ({"attention": "linear", "positions": "rotary"}, "attention"),
     ({"attention": "local", "positions": "relative"}, "attention"),
     ({"ffn": "moe", "moe_top_k": 5}, "moe_top_k"), ({"norm": "batchnorm"}, "norm"),
     ({"capacity_factor": 0.0}, "capacity_factor")],
)  # fmt: skip
def test_combinations_that_cannot_work_are_refused_by_name(options, field):
    from attnkit.errors import ConfigError

    with pytest.raises(ConfigError, match=f"^{field}:"):
        DecoderOnlyConfig.from_preset("small", vocab_size=30, **options)
