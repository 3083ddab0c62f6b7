"""install_lora / merge_lora on tiny random models of every family."""

from __future__ import annotations

import pytest
import torch
from adapter_model_helpers import ALL_ROLES, make_model, model_inputs, model_output

from attnkit.adapters import (
    LoRAConfig,
    LoRALinear,
    adapter_state,
    count_parameters,
    install_lora,
    lora_parameter_names,
    merge_lora,
)
from attnkit.errors import ConfigError


def test_zero_b_equals_the_base_at_step_0(family):
    model = make_model(family)
    inputs = model_inputs(family)
    with torch.no_grad():
        ref = model_output(model, inputs)
        install_lora(model, LoRAConfig(rank=4, targets=ALL_ROLES[family]))
        out = model_output(model, inputs)
    assert torch.equal(out, ref)  # B = 0: not close, equal


def test_merge_equals_base_plus_adapters(family, randomize_b):
    model = make_model(family)
    inputs = model_inputs(family)
    install_lora(model, LoRAConfig(rank=4, alpha=8, targets=ALL_ROLES[family]))
    randomize_b(model)
    with torch.no_grad():
        base = make_model(family)
        ref = model_output(base, inputs)
        adapted = model_output(model, inputs)
        assert (adapted - ref).abs().max() > 1e-3  # the adapters do change the output
        merged_count = merge_lora(model)
        merged = model_output(model, inputs)
    assert merged_count > 0
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    assert (merged - adapted).abs().max() < 1e-5
    # Merged, the model has the base model's state-dict names and shapes again.
    assert {k: v.shape for k, v in model.state_dict().items()} == {
        k: v.shape for k, v in base.state_dict().items()
    }


def test_only_adapters_are_trainable(family):
    model = make_model(family)
    total_before = sum(p.numel() for p in model.parameters())
    install_lora(model, LoRAConfig(rank=2, targets=ALL_ROLES[family]))
    trainable, total = count_parameters(model)
    lora = set(lora_parameter_names(model))
    assert lora and trainable == sum(p.numel() for n, p in model.named_parameters() if n in lora)
    assert total == total_before + trainable
    assert all(p.requires_grad == (n in lora) for n, p in model.named_parameters())
    assert set(adapter_state(model)) == lora


def test_a_few_steps_lower_the_loss_and_leave_the_base_unchanged(family):
    model = make_model(family).train()
    frozen = {k: v.clone() for k, v in model.state_dict().items()}
    install_lora(model, LoRAConfig(rank=4, alpha=8, targets=ALL_ROLES[family]))
    inputs = model_inputs(family)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=1e-2)
    losses = []
    with torch.no_grad():  # learn to say what the model now finds least likely
        target = model_output(model, inputs).argmin(-1)
    for _ in range(8):
        out = model_output(model, inputs)
        loss = torch.nn.functional.cross_entropy(out.flatten(0, -2), target.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] - 0.1
    for name, value in model.state_dict().items():
        if ".lora_" not in name:  # the wrapped linears' weights sit under .base.
            assert torch.equal(value, frozen[name.replace(".base.", ".")]), name


def test_fused_qkv_adapts_only_the_targeted_rows():
    model = make_model("decoder_only")  # grouped-query: 4 query heads, 2 key/value heads
    install_lora(model, LoRAConfig(rank=2, targets=("q", "v")))
    qkv = model.layers[0].self_attn.qkv_proj
    assert isinstance(qkv, LoRALinear)
    assert qkv.slices == {"q": (0, 32), "v": (48, 64)}  # D = 32 query rows, 16 key, 16 value
    with torch.no_grad():
        for b in qkv.lora_B.values():
            b.normal_()
    delta = qkv.delta_weight()
    assert delta[32:48].abs().max() == 0  # key rows exactly as the base
    assert delta[:32].abs().max() > 0 and delta[48:].abs().max() > 0
    assert not isinstance(model.layers[0].self_attn.out_proj, LoRALinear)
    assert not any(isinstance(m, LoRALinear) for m in model.layers[0].ffn.modules())


def test_cross_attention_is_matched_by_role():
    """The real ``CrossAttention``: ``q_proj`` (D -> D) and ``kv_proj`` (D -> 2 h_kv d),
    keys then values; a target of ``k`` and ``v`` adapts both blocks of ``kv_proj`` only."""
    from attnkit.attention.cross import CrossAttention

    attn = CrossAttention(32, 4, num_kv_heads=2)
    holder = torch.nn.Module()
    holder.cross_attn = attn
    names = install_lora(holder, LoRAConfig(rank=2, targets=("k", "v")))
    assert names == ["cross_attn.kv_proj"]
    assert not isinstance(attn.q_proj, LoRALinear)
    assert not isinstance(attn.out_proj, LoRALinear)
    assert isinstance(attn.kv_proj, LoRALinear)
    assert attn.kv_proj.slices == {"k": (0, 16), "v": (16, 32)}
    x, memory = torch.randn(2, 3, 32), torch.randn(2, 5, 32)
    with torch.no_grad():  # the adapted module still runs, cached keys/values included
        out, _ = attn(x, memory)
        cached, _ = attn(x, attn.project_kv(memory))
    assert out.shape == (2, 3, 32) and torch.allclose(out, cached)


def test_attention_score_parameters_are_not_targets():
    from attnkit.models import build_model
    from attnkit.models.registry import config_from_preset

    kw = dict(vocab_size=51, mask_id=50, num_layers=1, d_model=32, num_heads=4, d_ff=64,
              attention_score="additive")  # fmt: skip
    model = build_model(config_from_preset("encoder_only", "small", **kw))
    names = install_lora(model, LoRAConfig(targets=("q", "k")))
    assert names == ["encoder.layers.0.self_attn.qkv_proj"]


def test_missing_roles_and_double_install_are_named():
    with pytest.raises(ConfigError, match=r"lora.targets: RNNSeq2Seq has no ffn, v projection"):
        install_lora(make_model("rnn"), LoRAConfig(targets=("q", "v", "ffn")))
    model = make_model("vit")
    install_lora(model, LoRAConfig())
    with pytest.raises(ConfigError, match="already holds LoRA adapters"):
        install_lora(model, LoRAConfig())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"rank": 0}, r"lora.rank: must be >= 1, got 0"),
        ({"targets": ["q", "x"]}, r"lora.targets: unknown role 'x'"),
        ({"targets": []}, r"lora.targets: name at least one"),
        ({"dropout": 1.0}, r"lora.dropout: must be in \[0, 1\)"),
        ({"ranks": 4}, r"lora.ranks: unknown key; did you mean 'lora.rank'\?"),
    ],
)
def test_config_errors_name_the_field(data, message):
    with pytest.raises(ConfigError, match=message):
        LoRAConfig.from_dict(data)
