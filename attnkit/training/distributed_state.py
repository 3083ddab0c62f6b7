"""Checkpoints of a sharded (FSDP2) model in the single-process format.

Rank 0 gathers full tensors (weights and Adam state) so that a checkpoint
written under ``train.distributed=fsdp`` is the same file a single process
writes, and a single-process checkpoint loads back into a sharded model. For
an unsharded model (one process, DDP) every function here is the plain
``state_dict``/``load_state_dict``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.errors import CheckpointError
from attnkit.training.distributed import is_fsdp, unwrap


def full_model_state(model: nn.Module) -> dict[str, Tensor]:
    """The whole model's state dict. FSDP2: a collective; rank 0 gets the full
    tensors on the CPU, the other ranks an empty dict. Tied parameters come
    back as one tensor under each name (so the checkpoint stores them once)."""
    if not is_fsdp(model):
        return unwrap(model).state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state: dict[str, Any] = get_model_state_dict(model, options=options)
    groups: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    for names in groups.values():
        if names[0] in state:
            for alias in names[1:]:
                state[alias] = state[names[0]]
    return state


def load_full_model_state(model: nn.Module, state: Mapping[str, Tensor]) -> None:
    """Load a full (single-process format) state dict into a sharded FSDP2 model.

    Every rank holds the full tensors (each read the checkpoint); each keeps
    its shard. Done by hand rather than with ``set_model_state_dict``, which
    leaves the second name of a tied parameter unsharded.
    """
    from torch.distributed.tensor import DTensor, distribute_tensor

    current = model.state_dict()
    missing = sorted(set(current) - set(state))
    unexpected = sorted(set(state) - set(current))
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint does not fit the model: missing {missing[:4]}, unexpected {unexpected[:4]}"
        )
    loaded: dict[str, Tensor] = {}
    for key, have in current.items():
        full = state[key]
        if isinstance(have, DTensor):
            full = full.to(device=have.device, dtype=have.dtype)
            loaded[key] = distribute_tensor(full, have.device_mesh, have.placements)
        else:
            loaded[key] = full
    model.load_state_dict(loaded, strict=True)


def _optimizer_fqns(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Parameter names in the order ``optimizer.state_dict()`` numbers them."""
    names = {id(p): n for n, p in model.named_parameters()}
    seen: set[int] = set()
    fqns = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                fqns.append(names[id(p)])
    return fqns


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, object]:
    """``optimizer.state_dict()``, gathered from the shards under FSDP2 (a collective;
    rank 0 gets it, keyed by parameter index as a single process would; others ``{}``)."""
    if not is_fsdp(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    by_name = get_optimizer_state_dict(model, optimizer, options=options)
    if not by_name:
        return {}
    index = {fqn: i for i, fqn in enumerate(_optimizer_fqns(model, optimizer))}
    named_state: dict[str, object] = by_name["state"]  # type: ignore[assignment]
    return {
        "state": {index[fqn]: s for fqn, s in named_state.items()},
        # The groups as a single process has them (indices; betas stay a tuple).
        "param_groups": optimizer.state_dict()["param_groups"],
    }


def load_full_optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]
) -> None:
    """Load a single-process optimizer state dict into the optimizer of an FSDP2 model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    fqns = _optimizer_fqns(model, optimizer)
    by_name = {
        "state": {fqns[int(i)]: s for i, s in state["state"].items()},
        "param_groups": [
            {**g, "params": [fqns[int(i)] for i in g["params"]]} for g in state["param_groups"]
        ],
    }
    set_optimizer_state_dict(
        model,
        optimizer,
        by_name,  # type: ignore[arg-type]
        options=StateDictOptions(full_state_dict=True),
    )
    # The hyperparameters exactly as saved (the round trip above turns tuples into lists).
    for group, saved in zip(optimizer.param_groups, state["param_groups"], strict=True):
        group.update({k: v for k, v in saved.items() if k != "params"})
