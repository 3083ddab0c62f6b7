"""Adam as in §5.3, AdamW parameter groups."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnkit.errors import ConfigError
from attnkit.training.optim import build_optimizer, decay_parameters


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.norm = nn.LayerNorm(4)
        self.hidden = nn.Linear(4, 4)
        self.out = nn.Linear(4, 10, bias=False)
        self.out.weight = self.embed.weight  # tied (§3.4)


def test_adam_with_paper_hyperparameters():
    opt = build_optimizer(Tiny(), lr=1.0)
    assert type(opt) is torch.optim.Adam
    group = opt.param_groups[0]
    assert group["betas"] == (0.9, 0.98)
    assert group["eps"] == 1e-9
    assert group["weight_decay"] == 0.0
    assert not group["fused"]  # CPU parameters
    # the tied matrix is optimised once
    assert sum(p.numel() for p in group["params"]) == 40 + 8 + 20


def test_weight_decay_only_on_projection_matrices():
    model = Tiny()
    decay, no_decay = decay_parameters(model)
    assert [id(p) for p in decay] == [id(model.hidden.weight)]
    assert {id(p) for p in no_decay} == {
        id(model.embed.weight),  # also the tied output projection
        id(model.norm.weight),
        id(model.norm.bias),
        id(model.hidden.bias),
    }
    opt = build_optimizer(model, lr=1e-3, weight_decay=0.01)
    assert type(opt) is torch.optim.AdamW
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]


def test_bad_values_name_the_field():
    with pytest.raises(ConfigError, match="lr"):
        build_optimizer(Tiny(), lr=0.0)
    with pytest.raises(ConfigError, match="weight_decay"):
        build_optimizer(Tiny(), lr=1e-3, weight_decay=-1.0)
