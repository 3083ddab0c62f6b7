"""How large a LoRA rank may be for a model, checked before any adapter is allocated.

An adapter on a projection ``W`` ``(out, in)`` is ``B A`` with ``A`` ``(r, in)``
and ``B`` ``(out, r)``: its rank can never exceed ``min(in, out)`` (Hu et al.,
2021, §4.1), so a larger ``r`` adds no capacity, only memory. Without a
check, ``train.lora.rank: 3000000`` allocated gigabytes of ``A`` before the
allocator failed, and ``2**62`` overflowed inside PyTorch into an error
no-one could act on. ``check_rank`` refuses such a rank with one line naming
the field and the largest rank every target allows; ``adapter_bytes``
is what the adapters of an accepted rank hold, for callers that budget memory.

For a fused projection (self-attention's ``qkv_proj``) each adapted role's
row block is its own ``out``: adapting ``k`` of a grouped-query attention
with two key/value heads of 8 dimensions allows a rank of at most 16.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from attnkit.adapters.config import LoRAConfig
from attnkit.adapters.targets import find_targets, selected
from attnkit.errors import ConfigError


def _adapted_shapes(model: nn.Module, config: LoRAConfig) -> Iterator[tuple[str, int, int]]:
    """``(name, in, rows)`` of every adapter ``config`` would put into ``model``."""
    for target in find_targets(model):
        weight = getattr(target.owner, target.attribute).weight
        for role, (start, stop) in selected(target, config.targets).items():
            yield f"{target.name} ({role})", int(weight.shape[1]), stop - start


def max_rank(model: nn.Module, config: LoRAConfig) -> tuple[int, str] | None:
    """The largest rank every adapter of ``config`` on ``model`` allows, and the
    projection that sets it; ``None`` when ``config`` adapts nothing there."""
    best: tuple[int, str] | None = None
    for name, fan_in, rows in _adapted_shapes(model, config):
        limit = min(fan_in, rows)
        if best is None or limit < best[0]:
            best = (limit, name)
    return best


def check_rank(model: nn.Module, config: LoRAConfig, *, field: str = "lora") -> None:
    """``ConfigError`` naming ``{field}.rank`` when ``config.rank`` exceeds
    ``min(in, out)`` of a projection it adapts; allocates nothing."""
    found = max_rank(model, config)
    if found is None or config.rank <= found[0]:
        return
    limit, name = found
    raise ConfigError(
        f"{field}.rank: {config.rank} is more than {name} allows (min(in, out) = {limit}); "
        f"a rank above that adds no capacity, only memory; use at most {limit}"
    )


def adapter_bytes(model: nn.Module, config: LoRAConfig, *, element_size: int = 4) -> int:
    """Bytes of the adapters' ``A`` and ``B`` (``rank (in + rows)`` elements each)."""
    return sum(
        config.rank * (fan_in + rows) * element_size
        for _, fan_in, rows in _adapted_shapes(model, config)
    )


def check_rank_for_config(model_config: Any, config: LoRAConfig, *, field: str = "lora") -> None:
    """``check_rank`` on the model ``model_config`` describes, built on the ``meta``
    device (shapes only), so a run is refused before its data is read."""
    from attnkit.models import build_model

    with torch.device("meta"):
        model = build_model(model_config)
    check_rank(model, config, field=field)
