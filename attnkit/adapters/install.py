"""Put LoRA adapters into a model, take them out again, and name what they hold.

* ``install_lora(model, config)``: freezes every parameter, then replaces each
  targeted linear (``attnkit.adapters.targets``) by a ``LoRALinear`` that
  receives it, by name (``setattr`` on its owner; never a ``__class__`` swap).
  The model's forward, decoding and every other module are untouched.
* ``merge_lora(model)``: replaces every ``LoRALinear`` by a plain
  ``nn.Linear`` holding ``W + (alpha / r) B A``; the state-dict names are the
  base model's again, so the result is an ordinary model of its family.
* ``adapter_state(model)``: the tensors a LoRA run saves: the adapters, plus
  any other parameter left trainable (a new classification head).

``alpha / r`` and the targets travel with the checkpoint as a ``LoRAConfig``
(``attnkit.adapters.checkpoint``); installing the same config on the same
base recreates the same parameter names.
"""

from __future__ import annotations

from collections.abc import Collection

from torch import Tensor, nn

from attnkit.adapters.config import LoRAConfig
from attnkit.adapters.lora import LoRALinear
from attnkit.adapters.sizes import check_rank
from attnkit.adapters.targets import find_targets, roles_present, selected
from attnkit.errors import ConfigError


def install_lora(
    model: nn.Module, config: LoRAConfig, *, field: str = "lora", skip: Collection[str] = ()
) -> list[str]:
    """Freeze ``model`` and adapt its ``config.targets`` in place; returns the adapted names.

    ``skip``: projection names to leave without adapters (a checkpoint written
    before cross-attention was adapted: ``attnkit.checkpoints.adapters``).

    Raises ``ConfigError`` naming ``{field}.targets`` when a target role has no
    projection in this model (an RNN has no ``v`` or ``ffn``), ``{field}.rank``
    when the rank exceeds a target's ``min(in, out)`` (checked before anything is
    allocated), and when the model already holds adapters.
    """
    if any(isinstance(m, LoRALinear) for m in model.modules()):
        raise ConfigError("lora: the model already holds LoRA adapters; merge them first")
    missing = set(config.targets) - roles_present(model)
    if missing:
        kind = type(model).__name__
        raise ConfigError(
            f"{field}.targets: {kind} has no {', '.join(sorted(missing))} projection; "
            f"it has {', '.join(sorted(roles_present(model))) or 'none'}"
        )
    check_rank(model, config, field=field)
    for p in model.parameters():
        p.requires_grad_(False)
    adapted = []
    for target in list(find_targets(model)):
        rows = selected(target, config.targets)
        if not rows or target.name in skip:
            continue
        base = getattr(target.owner, target.attribute)
        lora = LoRALinear(base, rows, rank=config.rank, alpha=config.alpha, dropout=config.dropout)
        setattr(target.owner, target.attribute, lora)
        adapted.append(target.name)
    return adapted


def merge_lora(model: nn.Module) -> int:
    """Fold every adapter into its base weight, in place; returns how many were merged."""
    count = 0
    for owner in list(model.modules()):
        for name, child in list(owner.named_children()):
            if isinstance(child, LoRALinear):
                setattr(owner, name, child.merged())
                count += 1
    return count


def base_name(name: str) -> str | None:
    """The name a state-dict entry of an adapted model had in the base model (``None``
    for an adapter's own ``lora_A``/``lora_B``): ``...qkv_proj.base.weight`` was
    ``...qkv_proj.weight``."""
    if ".lora_A." in name or ".lora_B." in name:
        return None
    return name.replace(".base.", ".")


def adapted_projection(name: str) -> str | None:
    """The projection an adapter's state-dict entry belongs to (``None``: not an adapter's):
    ``...kv_proj.lora_A.k`` -> ``...kv_proj``."""
    for marker in (".lora_A.", ".lora_B."):
        if marker in name:
            return name.split(marker, 1)[0]
    return None


def lora_parameter_names(model: nn.Module) -> list[str]:
    """State-dict names of the adapters' ``A`` and ``B`` matrices."""
    return [
        name for name, _ in model.named_parameters() if ".lora_A." in name or ".lora_B." in name
    ]


def adapter_state(model: nn.Module) -> dict[str, Tensor]:
    """What a LoRA checkpoint stores: every trainable parameter (adapters, new heads),
    under its state-dict name, detached."""
    return {
        name: p.detach()
        for name, p in model.named_parameters()
        if p.requires_grad or ".lora_A." in name or ".lora_B." in name
    }


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts (tied matrices once)."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)
