"""Checkpoints of earlier attnkit versions load: the fused cross-attention ``qkv_proj``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnkit.checkpoints import load_model
from attnkit.checkpoints.files import MODEL_FILE
from attnkit.decoding import greedy_search
from attnkit.models.checkpoint_keys import upgrade_state_dict

# Written by attnkit 95db2e4 (data/write_fused_cross_checkpoint.py): 2 decoder
# layers, d_model 16, 4 query heads over 2 key/value heads.
OLD = Path(__file__).parent / "data" / "fused_cross_attention"


def test_a_checkpoint_with_fused_cross_attention_loads_and_computes_as_before():
    model = load_model(OLD, "cpu").model
    expected = load_file(str(OLD / "expected.safetensors"))
    with torch.no_grad():
        logits = model(expected["src"], expected["tgt"]).logits
    torch.testing.assert_close(logits, expected["logits"], rtol=1e-5, atol=1e-5)
    out = greedy_search(model, expected["src"], max_len=8)
    assert out.tokens == [[t for t in row if t >= 0] for row in expected["greedy"].tolist()]


def test_the_upgrade_splits_queries_from_keys_and_values():
    old = load_file(str(OLD / MODEL_FILE))
    fused = old["decoder.layers.1.cross_attn.qkv_proj.weight"]
    assert fused.shape == (16 + 2 * 2 * 4, 16)
    new = upgrade_state_dict(old)
    assert not any("cross_attn.qkv_proj" in k for k in new)
    assert torch.equal(new["decoder.layers.1.cross_attn.q_proj.weight"], fused[:16])
    assert torch.equal(new["decoder.layers.1.cross_attn.kv_proj.weight"], fused[16:])
    bias = old["decoder.layers.1.cross_attn.qkv_proj.bias"]
    assert torch.equal(new["decoder.layers.1.cross_attn.kv_proj.bias"], bias[16:])
    assert "decoder.layers.1.self_attn.qkv_proj.weight" in new  # self-attention stays fused


def test_the_upgrade_keeps_the_order_of_the_keys():
    old = {
        "a.cross_attn.qkv_proj.weight": torch.zeros(6, 2),
        "a.cross_attn.out_proj.weight": torch.zeros(2, 2),
    }
    assert list(upgrade_state_dict(old)) == [
        "a.cross_attn.q_proj.weight",
        "a.cross_attn.kv_proj.weight",
        "a.cross_attn.out_proj.weight",
    ]


def test_todays_keys_pass_through_untouched():
    state = {"decoder.layers.0.cross_attn.q_proj.weight": torch.zeros(2, 2)}
    assert upgrade_state_dict(state) is state


@pytest.mark.parametrize("key", ["cross_attn.qkv_proj.weight", "x.cross_attn.qkv_proj.bias"])
def test_a_layout_it_does_not_know_is_left_for_the_strict_load(key):
    state = {key: torch.zeros(6)}  # a 1-D "weight", or a bias without its weight
    assert upgrade_state_dict(state) == state
