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


def _t5(**kw):
    from attnkit.models import EncoderDecoder, TransformerConfig

    config = TransformerConfig.from_preset("t5_small_cpu", src_vocab_size=20, tgt_vocab_size=20,
                                           d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                                           num_decoder_layers=1, **kw)  # fmt: skip
    return EncoderDecoder(config)


def _lr_by_param(opt) -> dict[int, float]:
    return {id(p): float(g["lr"]) for g in opt.param_groups for p in g["params"]}


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("schedule", ["noam", "cosine", "constant"])
def test_position_tables_train_at_their_scaled_lr_through_every_schedule(weight_decay, schedule):
    from attnkit.training.optim import position_parameters
    from attnkit.training.schedules import build_scheduler

    model = _t5()
    tables = position_parameters(model)
    # one T5 bias table per stack, shared by its layers
    names = {n for n, p in model.named_parameters() if any(p is t for t in tables)}
    assert names == {"encoder.layers.0.self_attn.position_bias.table.weight",
                     "decoder.layers.0.self_attn.position_bias.table.weight"}  # fmt: skip
    opt = build_optimizer(model, lr=1e-3, weight_decay=weight_decay, position_lr_scale=10.0)
    # every trainable parameter once, in some group
    assert sorted(map(id, (p for g in opt.param_groups for p in g["params"]))) == sorted(
        map(id, model.parameters())
    )
    sched = build_scheduler(opt, schedule, d_model=16, warmup_steps=3, factor=1.0,
                            total_steps=10, min_lr=1e-5)  # fmt: skip
    for _ in range(5):
        opt.step()
        sched.step()
        lrs = _lr_by_param(opt)
        other = lrs[id(model.encoder.final_norm.weight)]
        assert other > 0
        for t in tables:
            assert lrs[id(t)] == pytest.approx(10.0 * other, rel=1e-9)


def test_a_scaled_table_moves_further_per_step():
    torch.manual_seed(0)
    moved = {}
    for scale in (1.0, 10.0):
        torch.manual_seed(0)
        model = _t5(dropout=0.0)
        table = model.encoder.layers[0].self_attn.position_bias.table.weight
        before = table.detach().clone()
        opt = build_optimizer(model, lr=1e-3, position_lr_scale=scale)
        src = torch.randint(4, 20, (2, 6))
        model(src, src).logits.square().mean().backward()
        opt.step()
        moved[scale] = (table.detach() - before).abs().max().item()
    # Adam's first step moves an entry by ~lr whatever its gradient: 10x the lr, 10x the move
    assert moved[10.0] == pytest.approx(10.0 * moved[1.0], rel=1e-3)


def test_scale_one_keeps_the_single_adam_group_and_a_model_without_tables_is_refused():
    assert len(build_optimizer(_t5(), lr=1e-3, position_lr_scale=1.0).param_groups) == 1
    with pytest.raises(ConfigError, match="position_lr_scale: 10.0 but the model has no"):
        build_optimizer(Tiny(), lr=1e-3, position_lr_scale=10.0)
    with pytest.raises(ConfigError, match="position_lr_scale: must be > 0"):
        build_optimizer(_t5(), lr=1e-3, position_lr_scale=0.0)
