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
