"""Reading a packed linear's stored form back from a state dict, for ``_load_from_state_dict``.

The packed linears (``PackedLinear``, ``Int4Linear``, ``Int8BlockLinear``) keep
their kernels' layouts out of ``state_dict`` and write a portable form instead;
loading reads those tensors and repacks. What a load must check is the same for
each: every stored tensor present, and a bias exactly where the module has one.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor


def read_stored(
    state_dict: dict[str, Tensor],
    prefix: str,
    names: Sequence[str],
    *,
    has_bias: bool,
    missing: list[str],
    unexpected: list[str],
) -> tuple[list[Tensor], Tensor | None] | None:
    """The tensors ``prefix + name`` of ``names`` and the bias (None if the module has none),
    or None after adding what is absent to ``missing`` (a bias the module lacks to
    ``unexpected``), as ``nn.Module._load_from_state_dict`` reports keys."""
    keys = [prefix + name for name in names]
    absent = [k for k in keys if k not in state_dict]
    if absent:
        missing.extend(absent)
        return None
    bias = state_dict.get(prefix + "bias")
    if (bias is None) == has_bias:
        (missing if bias is None else unexpected).append(prefix + "bias")
        return None
    return [state_dict[k] for k in keys], bias
