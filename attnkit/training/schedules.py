"""Learning-rate schedules: the paper's warmup schedule (§5.3), cosine, constant.

Every schedule is a small callable ``step -> multiplier`` wrapped in a
``LambdaLR``. Steps count optimizer updates from 1: the multiplier for step
``n`` is the one used by the ``n``-th ``optimizer.step()``. (``LambdaLR`` calls
its lambda with 0 before the first update, so the lambdas add 1.)

Being callable dataclasses rather than closures, their parameters appear in
``scheduler.state_dict()`` (plain numbers, JSON-friendly).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

from attnkit.errors import ConfigError

SCHEDULES = ("noam", "cosine", "constant")


def noam_lr(step: int, *, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """§5.3: ``factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)``.

    Rises linearly for ``warmup_steps`` updates, peaks at
    ``factor * (d_model * warmup_steps)**-0.5``, then decays as ``step**-0.5``.
    Step 0 (before any update) gives 0.0, the formula's limit, instead of
    dividing by zero.
    """
    if step <= 0:
        return 0.0
    # float(): typeshed leaves a float power untyped (it may be complex); these are real
    return float(factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5))


def warmup_cosine_lr(
    step: int, *, peak_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0
) -> float:
    """Linear warmup to ``peak_lr`` over ``warmup_steps``, then cosine decay to
    ``min_lr`` at ``total_steps`` (held there afterwards)."""
    if step < warmup_steps:
        return peak_lr * max(step, 0) / warmup_steps
    decay_steps = max(total_steps - warmup_steps, 1)
    progress = min((step - warmup_steps) / decay_steps, 1.0)
    return min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


@dataclass(frozen=True)
class NoamMultiplier:
    """``LambdaLR`` lambda for the §5.3 schedule; the optimizer's base lr is 1.0."""

    d_model: int
    warmup_steps: int
    factor: float = 1.0

    def __call__(self, last_epoch: int) -> float:
        return noam_lr(
            last_epoch + 1, d_model=self.d_model, warmup_steps=self.warmup_steps, factor=self.factor
        )


@dataclass(frozen=True)
class CosineMultiplier:
    """``LambdaLR`` lambda: warmup then cosine, as a fraction of the group's base lr."""

    warmup_steps: int
    total_steps: int
    min_ratio: float = 0.0  # min_lr / base lr of this parameter group

    def __call__(self, last_epoch: int) -> float:
        return warmup_cosine_lr(
            last_epoch + 1,
            peak_lr=1.0,
            warmup_steps=self.warmup_steps,
            total_steps=self.total_steps,
            min_lr=self.min_ratio,
        )


@dataclass(frozen=True)
class ConstantMultiplier:
    """``LambdaLR`` lambda: optional linear warmup, then the base lr."""

    warmup_steps: int = 0

    def __call__(self, last_epoch: int) -> float:
        step = last_epoch + 1
        return min(step / self.warmup_steps, 1.0) if self.warmup_steps > 0 else 1.0


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    name: str,
    *,
    d_model: int | None = None,
    warmup_steps: int = 0,
    factor: float = 1.0,
    total_steps: int | None = None,
    min_lr: float = 0.0,
) -> LambdaLR:
    """A ``LambdaLR`` for schedule ``name`` (``"noam"``, ``"cosine"``, ``"constant"``).

    - ``noam``: needs ``d_model`` and ``warmup_steps >= 1``; ``factor`` scales
      it. The optimizer's lr is set to 1.0 so that the multiplier *is* the lr
      (whatever lr the optimizer was built with is ignored), times a group's
      ``lr_scale`` where it has one.
    - ``cosine``: needs ``total_steps``; the optimizer's lr is the peak and
      ``min_lr`` the floor (absolute, times a group's ``lr_scale``).
    - ``constant``: the optimizer's lr, after ``warmup_steps`` of linear warmup.

    Keywords a schedule does not use are ignored, so a run config can pass all.
    """
    if warmup_steps < 0:
        raise ConfigError(f"warmup_steps: must be >= 0, got {warmup_steps}")
    if name == "noam":
        if d_model is None or d_model < 1:
            raise ConfigError(f"d_model: the noam schedule needs d_model >= 1, got {d_model}")
        if warmup_steps < 1:
            raise ConfigError(f"warmup_steps: the noam schedule needs >= 1, got {warmup_steps}")
        _set_base_lr(optimizer, 1.0)
        return LambdaLR(optimizer, NoamMultiplier(d_model, warmup_steps, factor))
    if name == "cosine":
        if total_steps is None or total_steps < 1:
            raise ConfigError(f"total_steps: the cosine schedule needs >= 1, got {total_steps}")
        # the floor scales with a group's lr_scale (attnkit.training.optim), as its peak does
        lambdas: list[Callable[[int], float]] = [
            CosineMultiplier(
                warmup_steps, total_steps, min_lr * group.get("lr_scale", 1.0) / _base_lr(group)
            )
            for group in optimizer.param_groups
        ]
        return LambdaLR(optimizer, lambdas)
    if name == "constant":
        return LambdaLR(optimizer, ConstantMultiplier(warmup_steps))
    raise ConfigError(
        f"schedule: unknown schedule {name!r}; expected one of {', '.join(SCHEDULES)}"
    )


def _base_lr(group: dict[str, Any]) -> float:  # torch types param groups so
    lr = float(group.get("initial_lr", group["lr"]))
    if lr <= 0:
        raise ConfigError(f"lr: must be > 0 for a cosine schedule, got {lr}")
    return lr


def _set_base_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        scaled = lr * group.get("lr_scale", 1.0)
        # A tensor lr (capturable/fused setups) is updated in place.
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(scaled)
        else:
            group["lr"] = scaled
        group.pop("initial_lr", None)  # LambdaLR records the new base from "lr"


def remaining_steps(done: int, elapsed: float, budget: float) -> int | None:
    """Steps that fit in what is left of ``budget`` seconds at the speed so far
    (``done`` steps in ``elapsed`` seconds, pauses included); ``None`` before 10 steps."""
    if done < 10 or elapsed <= 0:
        return None
    return max(1, int((budget - elapsed) * done / elapsed))


def set_total_steps(
    scheduler: LambdaLR, total: int, *, step: int = 0, warmup_fraction: float | None = None
) -> None:
    """Re-aim a cosine schedule's end at step ``total`` (``train.decay_to_budget``).

    With ``warmup_fraction``, the warm-up is that share of ``total`` as well, so a
    machine that reaches half the steps in the budget warms up for half as many
    steps instead of spending most of its run warming up. The warm-up is re-aimed
    only while it lasts (``step`` below its end): once the peak is passed it stays
    put, so a later, higher estimate never sends the rate back into warm-up.

    The multipliers are frozen dataclasses for safety elsewhere; this is the one
    place that moves their ends, and ``LambdaLR.state_dict`` saves them for resume.
    """
    for multiplier in scheduler.lr_lambdas:
        if isinstance(multiplier, CosineMultiplier):
            warmup = multiplier.warmup_steps
            if warmup_fraction is not None and step < warmup:
                warmup = max(step, round(warmup_fraction * total))
            object.__setattr__(multiplier, "warmup_steps", warmup)
            object.__setattr__(multiplier, "total_steps", max(total, warmup + 1))
