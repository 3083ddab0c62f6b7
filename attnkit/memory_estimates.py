"""Size checks before large allocations: what a model or a decode would need, and what there is.

A config (a run config, a checkpoint's ``config.json``, a command-line option)
can ask for more memory than the machine has: ``model.max_len: 10**12``
allocates a position table of 10**12 rows, ``--beam 1000000`` a logits
tensor of a million rows. On Linux such an allocation often *succeeds*
(overcommit) and the process grows until the kernel kills it, with no message
at all. So the callers here estimate first and refuse with one line:

* ``model_bytes(config)`` builds the model on PyTorch's ``meta`` device (shapes
  only, no memory) and sums its parameters and buffers, after a ceiling on
  layer counts (``MAX_LAYERS``) so that building even the meta model stays fast;
* ``available_bytes()`` is the smallest of the memory the kernel reports
  available (``MemAvailable``), the cgroup's limit less its usage, and the
  address-space limit (``RLIMIT_AS``) less the address space in use; on a
  CUDA device, the device's free memory;
* ``require(need, what, error=...)`` raises ``error`` naming what asked for it
  when ``need`` exceeds what is available.

Estimates count only what must exist (weights, their gradients and Adam's
two moments; the logits and cache of one decoding batch), so a refusal means
the work could not fit; work that passes may still run out of memory later,
which the CLI then reports as one line too.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from attnkit.errors import AttnkitError, ConfigError

C = TypeVar("C")  # a model config: whatever `build` takes

MAX_LAYERS = 1024  # per stack: deeper than any published model (GPT-3: 96)
MAX_MODULES = 1 << 16  # layers times experts: building the (meta) model stays under seconds


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _cgroup_available() -> int | None:
    root = Path("/sys/fs/cgroup")
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((root / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None


def _address_space_available() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return soft - int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return soft


def available_bytes(device: str | torch.device = "cpu") -> int | None:
    """Bytes this process can still allocate on ``device`` (``None``: unknown)."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    known = [
        b for b in (_meminfo_available(), _cgroup_available(), _address_space_available()) if b
    ]
    return max(min(known), 0) if known else None


def size(n: float) -> str:
    """``12.5 GiB``, ``300.0 MiB`` or ``1000 bytes``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{int(n)} bytes"


def require(
    need: int | None,
    what: str,
    *,
    device: str | torch.device = "cpu",
    error: Callable[[str], AttnkitError] = ConfigError,
) -> None:
    """Raise ``error("WHAT needs ~N GiB of memory, but M GiB is available ...")`` when
    ``need`` bytes exceed what ``device`` has free."""
    if need is None:
        return
    free = available_bytes(device)
    if free is not None and need > free:
        raise error(f"{what} needs at least {size(need)} of memory, but {size(free)} is available "
                    f"on {torch.device(device).type}; make it smaller")  # fmt: skip


def _check_layer_counts(config: object, prefix: str) -> None:
    fields = getattr(config, "__dataclass_fields__", {})
    layers = {n: getattr(config, n) for n in fields if n.endswith("layers")}
    experts = getattr(config, "num_experts", 1) if getattr(config, "ffn", "") == "moe" else 1
    for name, value in layers.items():
        if isinstance(value, int) and value > MAX_LAYERS:
            raise ConfigError(f"{prefix}{name}: must be <= {MAX_LAYERS}, got {value}")
        if isinstance(value, int) and isinstance(experts, int) and value * experts > MAX_MODULES:
            raise ConfigError(
                f"{prefix}num_experts: {experts} experts in each of {value} layers is more than "
                f"{MAX_MODULES} expert networks; use fewer"
            )


# Tensor factories whose ``device=`` argument _OnlyMeta overrides, and the moves it skips.
_FACTORIES = frozenset(
    {torch.arange, torch.empty, torch.zeros, torch.ones, torch.full, torch.rand, torch.randn,
     torch.randint, torch.tensor, torch.as_tensor, torch.linspace, torch.logspace, torch.eye,
     torch.empty_strided}
)  # fmt: skip
_MOVES = frozenset({torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda})


class _OnlyMeta(torch.overrides.TorchFunctionMode):
    """Every tensor made inside is a meta tensor, even one asked for on the CPU.

    ``torch.device("meta")`` only changes the *default* device: a module that
    builds its table with ``device="cpu"`` (a rotary table) would allocate it
    for real, 10**12 rows included. Here factories always get ``device="meta"``
    and moving a meta tensor is a no-op.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in _FACTORIES:
            kwargs["device"] = torch.device("meta")
        elif func in _MOVES and args and isinstance(args[0], torch.Tensor) and args[0].is_meta:
            return args[0]
        return func(*args, **kwargs)


def model_bytes(
    config: C, build: Callable[[C], torch.nn.Module], *, prefix: str = ""
) -> int | None:
    """Bytes of ``build(config)``'s parameters and buffers, measured on the meta device;
    ``None`` when the model cannot be built there (the check is then skipped).

    ``prefix`` (``model.``) names the config's fields in a refusal of too many layers.
    """
    _check_layer_counts(config, prefix)
    try:
        with torch.device("meta"), _OnlyMeta():
            model = build(config)
    except (NotImplementedError, RuntimeError):  # e.g. .item() of a meta tensor
        return None
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)
