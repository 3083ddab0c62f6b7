"""Learning-rate schedules against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.errors import ConfigError
from attnkit.training.schedules import build_scheduler, noam_lr, warmup_cosine_lr


def _optimizer(lr: float = 1e-3) -> torch.optim.Optimizer:
    return torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=lr)


def _lr_at(scheduler, optimizer, step: int) -> float:
    """The lr the ``step``-th update (1-based) uses."""
    for _ in range(step - 1):
        optimizer.step()
        scheduler.step()
    return optimizer.param_groups[0]["lr"]


def test_noam_values_d512_warmup4000():
    kw = dict(d_model=512, warmup_steps=4000)
    # step 1: 512^-0.5 * 1 * 4000^-1.5 = 0.0441942 * 3.9528e-6
    assert noam_lr(1, **kw) == pytest.approx(1.746928e-7, rel=1e-5)
    # peak at the end of warmup: 512^-0.5 * 4000^-0.5 = 0.0441942 * 0.0158114
    assert noam_lr(4000, **kw) == pytest.approx(6.987712e-4, rel=1e-6)
    # step 16000 = 4 * warmup: half the peak (inverse square root decay)
    assert noam_lr(16000, **kw) == pytest.approx(6.987712e-4 / 2, rel=1e-6)
    assert noam_lr(16000, **kw, factor=2.0) == pytest.approx(6.987712e-4, rel=1e-6)
    assert noam_lr(0, **kw) == 0.0  # no division by zero before the first update


def test_noam_scheduler_uses_step_n_for_the_nth_update():
    opt = _optimizer(lr=123.0)  # overwritten: the multiplier is the lr
    sched = build_scheduler(opt, "noam", d_model=512, warmup_steps=4)
    expected = [512**-0.5 * min(s**-0.5, s * 4**-1.5) for s in range(1, 9)]
    got = []
    for _ in expected:
        got.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert got == pytest.approx(expected, rel=1e-12)


def test_cosine_warmup_then_decay_to_min_lr():
    assert warmup_cosine_lr(5, peak_lr=1.0, warmup_steps=10, total_steps=110) == 0.5
    assert warmup_cosine_lr(10, peak_lr=1.0, warmup_steps=10, total_steps=110) == 1.0
    # halfway through the decay: cos(pi/2) = 0 -> midpoint of peak and min
    assert warmup_cosine_lr(
        60, peak_lr=1.0, warmup_steps=10, total_steps=110, min_lr=0.2
    ) == pytest.approx(0.6)
    assert warmup_cosine_lr(500, peak_lr=1.0, warmup_steps=10, total_steps=110, min_lr=0.2) == 0.2

    opt = _optimizer(lr=1e-3)
    sched = build_scheduler(opt, "cosine", warmup_steps=10, total_steps=110, min_lr=1e-4)
    assert _lr_at(sched, opt, 60) == pytest.approx(
        1e-4 + 0.9e-3 * 0.5 * (1 + math.cos(math.pi / 2))
    )


def test_constant_with_warmup():
    opt = _optimizer(lr=2e-3)
    sched = build_scheduler(opt, "constant", warmup_steps=4)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5e-3)  # step 1 of 4
    assert _lr_at(sched, opt, 4) == pytest.approx(2e-3)
    opt = _optimizer(lr=2e-3)
    build_scheduler(opt, "constant")
    assert opt.param_groups[0]["lr"] == 2e-3


def test_scheduler_state_round_trips_through_json():
    import json

    opt = _optimizer()
    sched = build_scheduler(opt, "noam", d_model=64, warmup_steps=10)
    for _ in range(3):
        opt.step()
        sched.step()
    state = json.loads(json.dumps(sched.state_dict()))
    opt2 = _optimizer()
    sched2 = build_scheduler(opt2, "noam", d_model=64, warmup_steps=10)
    sched2.load_state_dict(state)
    opt2.step()
    sched2.step()
    opt.step()
    sched.step()
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]


def test_bad_schedule_names_field_and_choices():
    with pytest.raises(ConfigError, match="schedule.*noam, cosine, constant"):
        build_scheduler(_optimizer(), "linear")
    with pytest.raises(ConfigError, match="warmup_steps"):
        build_scheduler(_optimizer(), "noam", d_model=512, warmup_steps=0)
    with pytest.raises(ConfigError, match="total_steps"):
        build_scheduler(_optimizer(), "cosine")


def test_remaining_steps_follow_the_measured_speed():
    from attnkit.training.schedules import remaining_steps

    assert remaining_steps(5, 1.0, 60.0) is None  # too few steps to judge
    assert remaining_steps(100, 10.0, 60.0) == 500  # 10 steps/s, 50 s left
    assert remaining_steps(100, 70.0, 60.0) == 1  # past the budget: one more at least


def test_a_cosine_schedule_can_be_re_aimed_and_the_end_survives_a_state_round_trip():
    import torch

    from attnkit.training.schedules import build_scheduler, set_total_steps

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_scheduler(opt, "cosine", warmup_steps=2, total_steps=1000, factor=1.0)
    set_total_steps(sched, 10)
    for _ in range(10):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)  # ended at step 10
    other = build_scheduler(
        torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), "cosine",
        warmup_steps=2, total_steps=1000,
    )  # fmt: skip
    other.load_state_dict(sched.state_dict())
    assert other.lr_lambdas[0].total_steps == 10


def test_decay_to_budget_needs_a_time_budget_and_a_cosine():
    from attnkit.errors import ConfigError
    from attnkit.training.runconfig import RunConfig

    with pytest.raises(ConfigError, match="^train.decay_to_budget: needs train.max_minutes"):
        RunConfig.from_dict({"train": {"decay_to_budget": True, "schedule": "cosine"}})
    run = RunConfig.from_dict(
        {"train": {"decay_to_budget": True, "schedule": "cosine", "max_minutes": 1}}
    )
    assert run.train.decay_to_budget
