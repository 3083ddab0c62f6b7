"""What a LoRA run trains and stores (``attnkit.training.weights``): adapters, and a head
the base does not have, in full."""

from __future__ import annotations

import pytest
import torch

from attnkit.adapters import LoRAConfig
from attnkit.checkpoints import save_checkpoint
from attnkit.checkpoints.adapters import BaseReference
from attnkit.errors import CheckpointError, ConfigError
from attnkit.models import build_model
from attnkit.models.registry import config_from_preset
from attnkit.training.runconfig import RunConfig
from attnkit.training.weights import FullWeights, LoRAWeights, weights_for_run


def _classifier():
    torch.manual_seed(0)
    sizes = dict(num_layers=1, d_model=32, num_heads=4, d_ff=64, num_labels=2)
    config = config_from_preset("encoder_only", "small", vocab_size=51, mask_id=50, **sizes)
    return build_model(config)


def test_a_new_head_trains_in_full_and_is_stored(tmp_path):
    model = _classifier()
    base_state = {k: v for k, v in model.state_dict().items() if not k.startswith("classifier.")}
    save_checkpoint(tmp_path / "base", model_state=base_state, config={})
    weights = LoRAWeights(LoRAConfig(rank=2), BaseReference.of(tmp_path / "base"))
    weights.prepare(model)
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
    weights.prepare(again)
    weights.load(again, stored, source=tmp_path / "x")
    assert all(torch.equal(again.state_dict()[k], v) for k, v in stored.items())
    with pytest.raises(CheckpointError, match="besides the adapters"):
        weights.load(again, {k: v for k, v in stored.items() if "classifier" not in k},
                     source=tmp_path / "x")  # fmt: skip


def test_weights_for_run():
    assert isinstance(weights_for_run(RunConfig.from_dict({"task": "lm"})), FullWeights)
    lora = {"task": "lm", "train": {"lora": {"rank": 2}}}
    with pytest.raises(ConfigError, match="train.lora: .* start from one with --init"):
        weights_for_run(RunConfig.from_dict(lora))
    fsdp = {**lora, "train": {"lora": {"rank": 2}, "distributed": "fsdp"},
            "init": {"path": "x", "checkpoint": "/x", "sha256": "0" * 64}}  # fmt: skip
    with pytest.raises(ConfigError, match="train.lora: not with train.distributed=fsdp"):
        weights_for_run(RunConfig.from_dict(fsdp))
