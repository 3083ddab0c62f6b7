"""The optimizer of §5.3: Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9.

With ``weight_decay > 0`` it becomes AdamW (decoupled decay, which the paper
does not use) with two parameter groups. Only projection matrices decay: the
``weight`` of every ``nn.Linear``, unless that matrix is also owned by another
module (an output projection tied to an embedding). Biases, LayerNorm
parameters, token embeddings and learned positions never decay: shrinking
them towards zero only fights the normalisation or hurts rare tokens.
"""

from __future__ import annotations

import torch
from torch import nn

from attnkit.errors import ConfigError


def decay_parameters(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """Split trainable parameters into ``(decay, no_decay)``, in ``model.parameters()`` order."""
    linear_weights: set[int] = set()
    owned_elsewhere: set[int] = set()
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


def build_optimizer(
    model: nn.Module,
    *,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    weight_decay: float = 0.0,
    fused: bool | None = None,
) -> torch.optim.Optimizer:
    """Adam (``weight_decay == 0``) or AdamW over ``model``'s trainable parameters.

    ``fused=None`` picks the fused CUDA kernel when every parameter is on a
    CUDA device, the default implementation otherwise. A ``noam`` schedule
    resets ``lr`` to 1.0 (see ``build_scheduler``).
    """
    if lr <= 0:
        raise ConfigError(f"lr: must be > 0, got {lr}")
    if weight_decay < 0:
        raise ConfigError(f"weight_decay: must be >= 0, got {weight_decay}")
    if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
        raise ConfigError(f"betas: expected two values in [0, 1), got {betas}")
    if eps <= 0:
        raise ConfigError(f"eps: must be > 0, got {eps}")

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ConfigError("model: has no trainable parameters to optimise")
    if fused is None:
        fused = all(p.is_cuda for p in params)
    betas = (float(betas[0]), float(betas[1]))

    if weight_decay == 0.0:
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps, fused=fused)
    decay, no_decay = decay_parameters(model)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    groups = [g for g in groups if g["params"]]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)
