"""The optimizer of §5.3: Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9.

With ``weight_decay > 0`` it becomes AdamW (decoupled decay, which the paper
does not use) with two parameter groups. Only projection matrices decay: the
``weight`` of every ``nn.Linear``, unless that matrix is also owned by another
module (an output projection tied to an embedding). Biases, LayerNorm
parameters, token embeddings and learned positions never decay: shrinking
them towards zero only fights the normalisation or hurts rare tokens; what
the modules declare a norm or a position term (``attnkit.roles``) never
decays, whatever holds it.

``position_lr_scale`` gives the learned relative-position terms (what the
modules declare ``relative_position``: T5's bucket tables, Shaw et al.'s
relative embeddings, Swin's window bias tables) their
own learning rate, ``lr`` times the scale, through the group key
``lr_scale`` that the schedules keep (``attnkit.training.schedules``). Why:
Adam moves each entry by about ``lr`` per step whatever its gradient, so a
bias table, whose single entries *are* score offsets, needs hundreds of steps
to reach the few units of bias that make attention local, while a projection
gets there through a d-wide dot product. On a copy task T5's bias alone took
~810 steps to reach a loss sinusoidal positions reach in ~270; at 10-30x, ~470
(docs/lab/results-history.md, the T5 section).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnkit.errors import ConfigError
from attnkit.roles import parameter_kinds

# Declared kinds that never decay (none is a projection matrix).
_NO_DECAY_KINDS = frozenset({"norm", "position", "relative_position"})


def decay_parameters(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """Split trainable parameters into ``(decay, no_decay)``, in ``model.parameters()`` order."""
    linear_weights: set[int] = set()
    params = dict(model.named_parameters())
    owned_elsewhere = {id(params[name]) for name, kind in parameter_kinds(model).items()
                       if kind in _NO_DECAY_KINDS}  # fmt: skip
    for module in model.modules():
        own = module.parameters(recurse=False)
        if isinstance(module, nn.Linear):
            linear_weights.add(id(module.weight))
        else:
            owned_elsewhere.update(id(p) for p in own)
    decay, no_decay = [], []
    for p in model.parameters():  # yields each tied parameter once
        if not p.requires_grad:
            continue
        if id(p) in linear_weights and id(p) not in owned_elsewhere:
            decay.append(p)
        else:
            no_decay.append(p)
    return decay, no_decay


def position_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The learned relative-position terms of ``model`` that are trainable, each once."""
    params = dict(model.named_parameters())  # each tied parameter once
    return [params[name] for name, kind in parameter_kinds(model).items()
            if kind == "relative_position" and params[name].requires_grad]  # fmt: skip


def build_optimizer(
    model: nn.Module,
    *,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    weight_decay: float = 0.0,
    fused: bool | None = None,
    position_lr_scale: float = 1.0,
) -> torch.optim.Optimizer:
    """Adam (``weight_decay == 0``) or AdamW over ``model``'s trainable parameters.

    ``fused=None`` picks the fused CUDA kernel when every parameter is on a
    CUDA device, the default implementation otherwise. A ``noam`` schedule
    resets ``lr`` to 1.0 (see ``build_scheduler``). ``position_lr_scale != 1``
    puts ``position_parameters`` in groups of their own, ``lr_scale`` set, and
    is a ``ConfigError`` for a model that has none.
    """
    if lr <= 0:
        raise ConfigError(f"lr: must be > 0, got {lr}")
    if weight_decay < 0:
        raise ConfigError(f"weight_decay: must be >= 0, got {weight_decay}")
    if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
        raise ConfigError(f"betas: expected two values in [0, 1), got {betas}")
    if eps <= 0:
        raise ConfigError(f"eps: must be > 0, got {eps}")
    if not position_lr_scale > 0:
        raise ConfigError(f"position_lr_scale: must be > 0, got {position_lr_scale}")

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ConfigError("model: has no trainable parameters to optimise")
    if fused is None:
        fused = all(p.is_cuda for p in params)
    betas = (float(betas[0]), float(betas[1]))

    if weight_decay == 0.0 and position_lr_scale == 1.0:
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps, fused=fused)
    if weight_decay == 0.0:
        groups: list[dict[str, object]] = [{"params": params, "weight_decay": 0.0}]
    else:
        decay, no_decay = decay_parameters(model)
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
    if position_lr_scale != 1.0:
        groups = _split_positions(model, groups, lr, position_lr_scale)
    groups = [g for g in groups if g["params"]]
    adam = torch.optim.Adam if weight_decay == 0.0 else torch.optim.AdamW
    return adam(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def _split_positions(
    model: nn.Module, groups: list[dict[str, Any]], lr: float, scale: float
) -> list[dict[str, object]]:
    """Each group split in two: its position parameters (at ``lr * scale``) and the rest."""
    positions = {id(p) for p in position_parameters(model)}
    if not positions:
        raise ConfigError(
            f"position_lr_scale: {scale} but the model has no learned relative-position "
            "terms (T5 bias tables, relative embeddings, Swin window tables) to scale"
        )
    out = []
    for group in groups:
        rest = [p for p in group["params"] if id(p) not in positions]
        mine = [p for p in group["params"] if id(p) in positions]
        out.append({**group, "params": rest, "lr_scale": 1.0})
        out.append({**group, "params": mine, "lr": lr * scale, "lr_scale": scale})
    return out
