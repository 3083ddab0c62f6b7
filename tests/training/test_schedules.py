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


def test_a_warmup_fraction_shrinks_the_warmup_with_the_steps_the_budget_reaches():
    import torch

    from attnkit.training.schedules import build_scheduler, set_total_steps

    def scheduler():
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        return build_scheduler(opt, "cosine", warmup_steps=600, total_steps=100_000)

    fast, slow = scheduler(), scheduler()
    set_total_steps(fast, 1700, step=10, warmup_fraction=0.3)
    set_total_steps(slow, 850, step=10, warmup_fraction=0.3)
    assert fast.lr_lambdas[0].warmup_steps == 510
    assert slow.lr_lambdas[0].warmup_steps == 255  # half the steps: half the warm-up
    assert slow.lr_lambdas[0].total_steps == 850
    # An estimate below the steps already taken ends the warm-up now, not in the past.
    set_total_steps(slow, 100, step=40, warmup_fraction=0.3)
    assert slow.lr_lambdas[0].warmup_steps == 40
    # Past the peak the warm-up stays put, whatever the new estimate: no second warm-up.
    set_total_steps(slow, 5000, step=41, warmup_fraction=0.3)
    assert slow.lr_lambdas[0].warmup_steps == 40
    assert slow.lr_lambdas[0].total_steps == 5000
    # Without a fraction the warm-up is a fixed number of steps, as before.
    fixed = scheduler()
    set_total_steps(fixed, 850, step=700)
    assert fixed.lr_lambdas[0].warmup_steps == 600


def test_the_warmup_fraction_is_validated_by_name():
    from attnkit.errors import ConfigError
    from attnkit.training.runconfig import RunConfig

    budget = {"decay_to_budget": True, "schedule": "cosine", "max_minutes": 1}
    with pytest.raises(ConfigError, match="^train.warmup_fraction: needs train.decay_to_budget"):
        RunConfig.from_dict({"train": {"warmup_fraction": 0.3}})
    for bad in (0.0, 1.0, float("nan"), -0.1):
        with pytest.raises(ConfigError, match="^train.warmup_fraction: must be (in|a finite)"):
            RunConfig.from_dict({"train": {**budget, "warmup_fraction": bad}})


@pytest.mark.parametrize("seconds_per_step", [0.125, 0.25])
def test_a_budgeted_run_warms_up_for_the_same_share_of_its_steps_at_any_speed(
    tmp_path, monkeypatch, seconds_per_step
):
    """The trainer on a fake clock: a run twice as slow reaches half the steps in its
    budget and warms up for half as many, so the peak comes at the same share of the run."""
    import json

    import attnkit.training.loop as loop
    from attnkit.data.synthetic import number_splits
    from attnkit.data.tokenizers import CharTokenizer
    from attnkit.training.loop import Trainer
    from attnkit.training.runconfig import RunConfig
    from attnkit.training.tasks import TranslationTask

    clock = [0.0]

    class FakeTime:
        @staticmethod
        def perf_counter() -> float:
            return clock[0]

    monkeypatch.setattr(loop, "time", FakeTime)
    pairs = number_splits(100, 10, 0, low=1, high=999, seed=0)
    run = RunConfig.from_dict(
        {
            "model": {"preset": "small", "d_model": 16, "num_heads": 2, "d_ff": 32,
                      "num_encoder_layers": 1, "num_decoder_layers": 1, "max_len": 96},
            "train": {"max_tokens": 300, "schedule": "cosine", "lr": 1e-3, "warmup_steps": 50,
                      "warmup_fraction": 0.25, "decay_to_budget": True, "max_minutes": 0.2,
                      "log_every": 1, "eval_every": 1000, "save_every": 0, "keep_last": 0,
                      "save_fraction": 0.25, "valid_bleu_sentences": 0},
        }
    )  # fmt: skip
    texts = [s for s, _ in pairs["train"]] + [t for _, t in pairs["train"]]
    task = TranslationTask(run, CharTokenizer.train(texts), pairs["train"], pairs["valid"])
    trainer = Trainer(run, task, tmp_path, progress=False)
    step = trainer.train_step

    def timed_step():
        clock[0] += seconds_per_step
        return step()

    monkeypatch.setattr(trainer, "train_step", timed_step)
    trainer.fit()
    steps = round(12.0 / seconds_per_step)  # 0.2 minutes of fake time
    assert trainer.step == steps
    lrs = [r["lr"] for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())
           if r["split"] == "train"]  # fmt: skip
    peak = max(range(len(lrs)), key=lrs.__getitem__) + 1
    assert peak == pytest.approx(0.25 * steps, abs=2)
    assert lrs[-1] == pytest.approx(0.0, abs=1e-9)  # annealed at the end of the budget
    # Checkpoints at each quarter of the steps the budget reaches, whatever the speed.
    saved = sorted(int(p.name.split("_")[1]) for p in (tmp_path / "checkpoints").glob("step_*"))
    assert saved == [steps // 4, steps // 2, 3 * steps // 4, steps]


def test_the_save_fraction_is_validated_by_name():
    from attnkit.errors import ConfigError
    from attnkit.training.runconfig import RunConfig

    with pytest.raises(ConfigError, match="^train.save_fraction: needs train.max_minutes"):
        RunConfig.from_dict({"train": {"save_fraction": 0.1}})
    for bad in (0.0, 1.0, float("nan")):
        with pytest.raises(ConfigError, match="^train.save_fraction: must be (in|a finite)"):
            RunConfig.from_dict({"train": {"max_minutes": 1, "save_fraction": bad}})
