"""What a LoRA run trains and stores (``attnkit.training.weights``): adapters, and a head
the base does not have, in full."""

from __future__ import annotations

import pytest
import torch

from attnkit.adapters import LoRAConfig
from attnkit.errors import CheckpointError, ConfigError
from attnkit.models import build_model
from attnkit.models.registry import config_from_preset
from attnkit.training.runconfig import RunConfig
from attnkit.training.warm_start import InitSource, WarmStart
from attnkit.training.weights import FullWeights, LoRAWeights, weights_for_run


def _classifier():
    torch.manual_seed(0)
    sizes = dict(num_layers=1, d_model=32, num_heads=4, d_ff=64, num_labels=2)
    config = config_from_preset("encoder_only", "small", vocab_size=51, mask_id=50, **sizes)
    return build_model(config)


def _start(model) -> WarmStart:
    """A base that lacks the classifier's head, as the task's ``WarmStart`` holds it."""
    base_state = {k: v for k, v in model.state_dict().items() if not k.startswith("classifier.")}
    source = InitSource("base", "/abs/base", "0" * 64, "encoder_only")
    return WarmStart(model.config, base_state, None, source)


def test_a_new_head_trains_in_full_and_is_stored(tmp_path):
    model = _classifier()
    start = _start(model)
    weights = LoRAWeights(LoRAConfig(rank=2), start)
    with pytest.raises(RuntimeError, match="has not loaded the --init weights"):
        weights.prepare(model)
    start.load_weights(model, head=("classifier",))
    weights.prepare(model)
    assert weights.info.base == start.base  # what adapter.json records
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    heads = {n for n in trainable if n.startswith("classifier.")}
    assert heads == {"classifier.pooler.weight", "classifier.pooler.bias",
                     "classifier.classifier.weight", "classifier.classifier.bias"}  # fmt: skip
    assert all(".lora_" in n for n in trainable - heads)
    stored = weights.state(model.state_dict())
    assert set(stored) == trainable
    # Back into a freshly prepared model: the same tensors, wherever they go.
    again = _classifier()
    torch.nn.init.normal_(again.classifier.classifier.weight)
    start.load_weights(again, head=("classifier",))
    weights.prepare(again)
    weights.load(again, stored, source=tmp_path / "x")
    assert all(torch.equal(again.state_dict()[k], v) for k, v in stored.items())
    with pytest.raises(CheckpointError, match="besides the adapters"):
        weights.load(again, {k: v for k, v in stored.items() if "classifier" not in k},
                     source=tmp_path / "x")  # fmt: skip


def test_a_pretrained_pooler_trains_in_full_as_the_head_declares():
    """The base has the pooler (an import's): not fresh, but a declared ``head``: trained."""
    model = _classifier()
    start = _start(model)
    start.state.update({k: v for k, v in model.state_dict().items() if ".pooler." in k})
    start.load_weights(model, head=("classifier",))
    assert sorted(start.fresh or ()) == ["classifier.classifier.bias",
                                         "classifier.classifier.weight"]  # fmt: skip
    weights = LoRAWeights(LoRAConfig(rank=2), start)
    weights.prepare(model)
    assert "classifier.pooler.weight" in weights.trained


def test_weights_for_run():
    model = _classifier()
    start = _start(model)
    assert isinstance(weights_for_run(RunConfig.from_dict({"task": "lm"})), FullWeights)
    lora = {"task": "lm", "train": {"lora": {"rank": 2}}}
    with pytest.raises(ConfigError, match="train.lora: .* start from one with --init"):
        weights_for_run(RunConfig.from_dict(lora))
    assert isinstance(weights_for_run(RunConfig.from_dict(lora), start), LoRAWeights)
    fsdp = {**lora, "train": {"lora": {"rank": 2}, "distributed": "fsdp"}}
    with pytest.raises(ConfigError, match="train.lora: not with train.distributed=fsdp"):
        weights_for_run(RunConfig.from_dict(fsdp), start)


def test_a_format_1_checkpoint_cannot_resume(tmp_path):
    """Written before cross-attention had adapters: resuming would train other adapters."""
    import json

    from attnkit.checkpoints.adapters import ADAPTER_FILE

    model = _classifier()
    start = _start(model)
    start.load_weights(model, head=("classifier",))
    weights = LoRAWeights(LoRAConfig(rank=2), start)
    weights.prepare(model)
    stored = weights.state(model.state_dict())
    data = json.loads(weights.files()[ADAPTER_FILE])
    assert data["format"] == 2
    (tmp_path / ADAPTER_FILE).write_text(json.dumps({**data, "format": 1}), encoding="utf-8")
    with pytest.raises(CheckpointError, match="format 1, written before attnkit adapted cross"):
        weights.load(model, stored, source=tmp_path / "model.safetensors")
    (tmp_path / ADAPTER_FILE).write_text(json.dumps(data), encoding="utf-8")
    weights.load(model, stored, source=tmp_path / "model.safetensors")
