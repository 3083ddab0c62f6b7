"""LoRA checkpoints: only the adapters on disk, the base found by path and hash, merged on load."""

from __future__ import annotations

import json

import pytest
import torch
from lora_helpers import char_tokenizer, lora_run, save_base, tiny_lm

from attnkit.adapters import lora_parameter_names
from attnkit.checkpoints import MODEL_FILE, load_model, load_tensors
from attnkit.checkpoints.adapters import (
    ADAPTER_FILE,
    BaseReference,
    adapted_weights,
    weights_sha256,
)
from attnkit.errors import CheckpointError


def test_only_the_adapters_are_saved(tmp_path):
    base, out, model = lora_run(tmp_path)
    saved = load_tensors(out / MODEL_FILE)
    assert set(saved) == set(lora_parameter_names(model))
    assert (out / MODEL_FILE).stat().st_size < (base / MODEL_FILE).stat().st_size / 2
    info = json.loads((out / ADAPTER_FILE).read_text())
    assert info["base"] == {"path": str(base.resolve()), "sha256": weights_sha256(base)}
    assert info["lora"]["targets"] == ["q", "v", "o", "ffn"]


def test_loading_merges_and_equals_base_plus_adapters(tmp_path):
    _, out, adapted = lora_run(tmp_path)
    ids = torch.randint(3, 20, (2, 9))
    with torch.no_grad():
        expected = adapted.eval()(ids).logits
        loaded = load_model(out, "cpu")
        got = loaded.model(ids).logits
    assert not any("lora" in name for name in loaded.model.state_dict())  # merged
    assert (got - expected).abs().max() < 1e-5
    assert loaded.tokenizer.vocab_size == char_tokenizer().vocab_size


def test_a_changed_base_is_refused_in_one_line(tmp_path):
    base, out, _ = lora_run(tmp_path)
    save_base(base, seed=1)
    with pytest.raises(CheckpointError) as e:
        load_model(out, "cpu")
    message = str(e.value)
    assert "\n" not in message
    assert f"{out / ADAPTER_FILE}: {base.resolve()} is not the base" in message


def test_a_moved_base_is_named_and_can_be_given(tmp_path):
    base, out, adapted = lora_run(tmp_path)
    moved = base.rename(tmp_path / "elsewhere")
    with pytest.raises(CheckpointError, match="its base checkpoint .* is not there"):
        load_model(out, "cpu")
    tensors = load_tensors(out / MODEL_FILE)
    keys = set(tiny_lm().state_dict())
    weights = adapted_weights(out, tensors, keys, base=moved)
    assert weights is not None and set(weights.model_state) == keys


def test_a_lora_checkpoint_is_not_a_base(tmp_path):
    _, out, _ = lora_run(tmp_path)
    with pytest.raises(CheckpointError, match="is itself a LoRA checkpoint; merge it first"):
        BaseReference.of(out)


def test_lora_checkpoints_are_not_averaged(tmp_path):
    from attnkit.checkpoints import average_checkpoints

    _, out, _ = lora_run(tmp_path)
    with pytest.raises(CheckpointError, match="a LoRA checkpoint .*merge each one first"):
        average_checkpoints([out, out])


def test_tensor_names_reads_the_header_and_keeps_tied_keys(tmp_path):
    from attnkit.checkpoints.safe_files import tensor_names

    base, _, _ = lora_run(tmp_path)
    names = tensor_names(base / MODEL_FILE)
    assert names == set(load_tensors(base / MODEL_FILE)) and "lm_head.weight" in names


def _seq2seq_lora(tmp_path, *, skip_cross: bool, fmt: int):
    """A tiny encoder-decoder base and a LoRA checkpoint on it; ``skip_cross``: as an
    attnkit before the modules declared their roles wrote it (no cross-attention adapters)."""
    from lora_helpers import randomize_b

    from attnkit.adapters import LoRAConfig, find_targets, install_lora
    from attnkit.checkpoints import save_checkpoint
    from attnkit.checkpoints.adapters import AdapterInfo, save_lora_checkpoint
    from attnkit.models import TransformerConfig, build_model

    torch.manual_seed(0)
    config = TransformerConfig.from_preset("small", src_vocab_size=31, tgt_vocab_size=31,
                                           d_model=32, num_heads=4, d_ff=64, dropout=0.0,
                                           num_encoder_layers=1, num_decoder_layers=1)  # fmt: skip
    model = build_model(config).eval()
    base = tmp_path / "base"
    tokenizer = char_tokenizer().to_json()
    save_checkpoint(base, model_state=model.state_dict(), config=config.to_dict(),
                    tokenizer_json=tokenizer)  # fmt: skip
    lora = LoRAConfig(rank=2, targets=("q", "v"))
    cross = {t.name for t in find_targets(model) if ".cross_attn." in t.name}
    install_lora(model, lora, skip=cross if skip_cross else ())
    randomize_b(model)
    out = tmp_path / "lora"
    info = AdapterInfo(lora, BaseReference.of(base), fmt)
    save_lora_checkpoint(out, model, info, config=config.to_dict(), tokenizer_json=tokenizer)
    return out, model


def test_a_format_1_checkpoint_without_cross_attention_adapters_loads(tmp_path):
    out, adapted = _seq2seq_lora(tmp_path, skip_cross=True, fmt=1)
    assert json.loads((out / ADAPTER_FILE).read_text())["format"] == 1
    src, tgt = torch.randint(3, 20, (2, 7)), torch.randint(3, 20, (2, 5))
    with torch.no_grad():
        expected = adapted(src, tgt).logits
        got = load_model(out, "cpu").model(src, tgt).logits
    assert (got - expected).abs().max() < 1e-5


def test_a_current_checkpoint_holds_cross_attention_adapters_and_needs_them(tmp_path):
    out, adapted = _seq2seq_lora(tmp_path, skip_cross=False, fmt=2)
    saved = load_tensors(out / MODEL_FILE)
    assert any(".cross_attn.q_proj.lora_B.q" in name for name in saved)
    assert any(".cross_attn.kv_proj.lora_B.v" in name for name in saved)
    src, tgt = torch.randint(3, 20, (2, 7)), torch.randint(3, 20, (2, 5))
    with torch.no_grad():
        assert (
            load_model(out, "cpu").model(src, tgt).logits - adapted(src, tgt).logits
        ).abs().max() < 1e-5
    (tmp_path / "broken").mkdir()  # format 2 without the cross-attention adapters: an error
    out2, _ = _seq2seq_lora(tmp_path / "broken", skip_cross=True, fmt=2)
    with pytest.raises(CheckpointError, match="the adapters do not fit the model: missing"):
        load_model(out2, "cpu")
