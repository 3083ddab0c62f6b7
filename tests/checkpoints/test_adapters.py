"""LoRA checkpoints: only the adapters on disk, the base found by path and hash, merged on load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from attnkit.adapters import LoRAConfig, install_lora, lora_parameter_names
from attnkit.checkpoints import MODEL_FILE, load_model, load_tensors, save_checkpoint
from attnkit.checkpoints.adapters import (
    ADAPTER_FILE,
    AdapterInfo,
    BaseReference,
    adapted_weights,
    save_lora_checkpoint,
    weights_sha256,
)
from attnkit.data.tokenizers import CharTokenizer
from attnkit.errors import CheckpointError
from attnkit.models import DecoderOnlyConfig, build_model

TEXT = "the quick brown fox jumps over the lazy dog " * 4


def make_model(name: str, seed: int = 0) -> torch.nn.Module:
    assert name == "decoder_only"
    torch.manual_seed(seed)
    config = DecoderOnlyConfig.from_preset("small", vocab_size=40, d_model=32, num_heads=4,
                                           num_kv_heads=2, d_ff=64, num_layers=2, dropout=0.0,
                                           activation="swiglu", norm="rmsnorm")  # fmt: skip
    return build_model(config).eval()


@pytest.fixture
def randomize_b():
    def run(model: torch.nn.Module) -> None:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".lora_B." in name:
                    p.normal_(0, 0.1)

    return run


def _tokenizer() -> CharTokenizer:
    return CharTokenizer.train([TEXT])


def _base(tmp_path: Path) -> tuple[Path, torch.nn.Module]:
    model = make_model("decoder_only")
    base = tmp_path / "base"
    save_checkpoint(base, model_state=model.state_dict(), config=model.config.to_dict(),
                    tokenizer_json=_tokenizer().to_json())  # fmt: skip
    return base, model


def _lora_run(tmp_path: Path, randomize_b) -> tuple[Path, Path, torch.nn.Module]:
    base, model = _base(tmp_path)
    install_lora(model, LoRAConfig(rank=4, alpha=8, targets=("q", "v", "o", "ffn")))
    randomize_b(model)
    info = AdapterInfo(LoRAConfig(rank=4, alpha=8, targets=("q", "v", "o", "ffn")),
                       BaseReference.of(base))  # fmt: skip
    out = tmp_path / "lora"
    save_lora_checkpoint(out, model, info, config=model.config.to_dict(),
                         tokenizer_json=_tokenizer().to_json())  # fmt: skip
    return base, out, model


def test_only_the_adapters_are_saved(tmp_path, randomize_b):
    base, out, model = _lora_run(tmp_path, randomize_b)
    saved = load_tensors(out / MODEL_FILE)
    assert set(saved) == set(lora_parameter_names(model))
    assert (out / MODEL_FILE).stat().st_size < (base / MODEL_FILE).stat().st_size / 2
    info = json.loads((out / ADAPTER_FILE).read_text())
    assert info["base"] == {"path": str(base.resolve()), "sha256": weights_sha256(base)}
    assert info["lora"]["targets"] == ["q", "v", "o", "ffn"]


def test_loading_merges_and_equals_base_plus_adapters(tmp_path, randomize_b):
    _, out, adapted = _lora_run(tmp_path, randomize_b)
    ids = torch.randint(3, 20, (2, 9))
    with torch.no_grad():
        expected = adapted.eval()(ids).logits
        loaded = load_model(out, "cpu")
        got = loaded.model(ids).logits
    assert not any("lora" in name for name in loaded.model.state_dict())  # merged
    assert (got - expected).abs().max() < 1e-5
    assert loaded.tokenizer.vocab_size == _tokenizer().vocab_size


def test_a_changed_base_is_refused_in_one_line(tmp_path, randomize_b):
    base, out, _ = _lora_run(tmp_path, randomize_b)
    other = make_model("decoder_only", seed=1)
    save_checkpoint(base, model_state=other.state_dict(), config=other.config.to_dict(),
                    tokenizer_json=_tokenizer().to_json())  # fmt: skip
    with pytest.raises(CheckpointError) as e:
        load_model(out, "cpu")
    message = str(e.value)
    assert "\n" not in message
    assert f"{out / ADAPTER_FILE}: {base.resolve()} is not the base" in message


def test_a_moved_base_is_named_and_can_be_given(tmp_path, randomize_b):
    base, out, adapted = _lora_run(tmp_path, randomize_b)
    moved = base.rename(tmp_path / "elsewhere")
    with pytest.raises(CheckpointError, match="its base checkpoint .* is not there"):
        load_model(out, "cpu")
    tensors = load_tensors(out / MODEL_FILE)
    keys = set(make_model("decoder_only").state_dict())
    weights = adapted_weights(out, tensors, keys, base=moved)
    assert weights is not None and set(weights.model_state) == keys


def test_a_lora_checkpoint_is_not_a_base(tmp_path, randomize_b):
    _, out, _ = _lora_run(tmp_path, randomize_b)
    with pytest.raises(CheckpointError, match="is itself a LoRA checkpoint; merge it first"):
        BaseReference.of(out)
