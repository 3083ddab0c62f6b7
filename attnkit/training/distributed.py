"""Data-parallel training on PyTorch's distributed engine, launched by ``torchrun``.

``torchrun --nproc_per_node=N -m attnkit train ...`` starts N processes with
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (and the rendezvous address) in
their environment. ``init_distributed`` reads them, gives each process one
device (``cuda:LOCAL_RANK``, or the CPU) and joins the process group: NCCL on
GPUs, gloo on the CPU. Without those variables, or with ``WORLD_SIZE=1``,
nothing here does anything and training is an ordinary single process.

Two strategies (``train.distributed``):

* ``ddp`` (default): every rank holds the whole model and the whole Adam
  state; ``DistributedDataParallel`` averages the gradients during backward.
* ``fsdp``: FSDP2 (``torch.distributed.fsdp.fully_shard``) shards every
  encoder and decoder layer, then the root (embeddings, output projection),
  so parameters, gradients and Adam state are split across the ranks; a layer
  is all-gathered only for its forward and backward. Checkpoints are gathered
  into full state dicts on rank 0, so they have the single-process format.

Data: every rank builds the same global batches (same seed, same order) and
rank ``r`` takes examples ``r, r + N, r + 2N, ...`` of each (``DistContext.shard``):
the shares are disjoint and their union is exactly the single-process batch.
The trainer divides the gradients by the *global* target-token count (summed
over ranks), so N ranks make the same update as one rank on the whole batch.

Only rank 0 writes (checkpoints, ``metrics.jsonl``, ``loss.png``, ``run.json``)
and prints; the other ranks wait at a barrier while it saves.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

from attnkit.errors import ConfigError, UsageError

STRATEGIES = ("ddp", "fsdp")
T = TypeVar("T")


@dataclass(frozen=True)
class DistContext:
    """Where this process stands: its rank among ``world_size`` and its device.

    The default is a single process on the CPU; every collective below is then
    a no-op that returns its input.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def enabled(self) -> bool:
        """More than one process: the collectives below really communicate."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes files and prints."""
        return self.rank == 0

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's share of a global batch: items ``rank, rank + N, ...``."""
        return list(items[self.rank :: self.world_size])

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def on_main(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T | None:
        """``fn(*args, **kwargs)`` on rank 0 once every rank got here; the others wait.

        For work that touches shared files (preparing the run directory).
        """
        self.barrier()
        result = fn(*args, **kwargs) if self.is_main else None
        self.barrier()
        return result

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over ranks (float64, one all-reduce)."""
        if not self.enabled:
            return [float(v) for v in values]
        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is True on any rank."""
        if not self.enabled:
            return flag
        t = torch.tensor([int(flag)], dtype=torch.int32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def from_main(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank (decisions such as "out of time")."""
        if not self.enabled:
            return flag
        t = torch.tensor([int(flag)], dtype=torch.int32, device=self.device)
        dist.broadcast(t, src=0)
        return bool(t.item())

    def gather(self, obj: object) -> list[object]:
        """``obj`` of every rank, in rank order, on every rank (small objects only)."""
        if not self.enabled:
            return [obj]
        out: list[object] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out


def _parse_device(name: str | None) -> torch.device:
    if name in (None, "auto"):
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        return torch.device(name)
    except (RuntimeError, TypeError):
        raise UsageError(f"--device {name}: not a device (cpu, cuda, cuda:1, ...)") from None


def _device_for_rank(name: str | None, local_rank: int) -> torch.device:
    device = _parse_device(name)
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise UsageError(f"--device {name}: distributed training runs on cuda or cpu")
    if device.index is not None and device.index != local_rank:
        raise UsageError(
            f"--device {name}: under torchrun each rank uses cuda:LOCAL_RANK; "
            "pass --device cuda (or auto)"
        )
    return torch.device("cuda", local_rank)


def init_distributed(device: str | None = "auto", *, quiet_others: bool = True) -> DistContext:
    """Join the process group that ``torchrun`` set up, or stay a single process.

    Reads ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``; picks ``cuda:LOCAL_RANK``
    (``device`` ``auto``/``cuda`` with a GPU) with NCCL, or the CPU with gloo.
    ``quiet_others`` sends the standard output of ranks other than 0 to
    ``/dev/null`` (their errors still reach stderr). The group is destroyed
    at exit. Calling it again in a process that already joined reuses the group.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world_size <= 1:
        return DistContext(device=_parse_device(device))
    if "RANK" not in os.environ:
        raise UsageError(f"WORLD_SIZE={world_size} but RANK is not set; launch with torchrun")
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    dev = _device_for_rank(device, local_rank)
    if not dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
            dist.init_process_group("nccl", device_id=dev)
        else:
            dist.init_process_group("gloo")
        atexit.register(cleanup)
    if quiet_others and rank != 0:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (lives until exit)
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank, device=dev)


def cleanup() -> None:
    """Leave the process group (safe to call twice, or without one)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# -- wrapping the model ---------------------------------------------------------------


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ConfigError(
            f"train.distributed: expected {' or '.join(STRATEGIES)}, got {strategy!r}"
        )


def layer_modules(model: nn.Module) -> list[nn.Module]:
    """The Transformer layers FSDP shards one by one (none for an RNN): every layer of
    every ``nn.ModuleList`` of blocks (``encoder.layers``, ``decoder.layers``, a
    decoder-only model's ``layers``)."""
    from attnkit.blocks import DecoderLayer, EncoderLayer

    return [m for m in model.modules() if isinstance(m, EncoderLayer | DecoderLayer)]


def wrap_model(model: nn.Module, ctx: DistContext, strategy: str = "ddp") -> nn.Module:
    """The module to train with: ``model`` itself (one process), DDP, or FSDP2.

    DDP returns a wrapper (``model`` stays the plain module, its parameters
    shared). FSDP2 shards ``model`` in place (each layer, then the root) and
    returns it; build the optimizer afterwards, over its (sharded) parameters.
    """
    check_strategy(strategy)
    if not ctx.enabled:
        return model
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    for layer in layer_modules(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def is_fsdp(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module inside a DDP wrapper and/or ``torch.compile``."""
    from torch.nn.parallel import DistributedDataParallel

    while True:
        inner = getattr(
            model, "module" if isinstance(model, DistributedDataParallel) else "_orig_mod", None
        )
        if not isinstance(inner, nn.Module):  # neither DDP's wrapper nor torch.compile's
            return model
        model = inner


@contextmanager
def gathered_parameters(model: nn.Module) -> Iterator[None]:
    """All parameters unsharded for the duration (FSDP2; a no-op otherwise).

    Decoding calls methods other than ``forward`` (``encode``, ``step``),
    which FSDP's hooks do not see; with every module unsharded and
    ``reshard_after_forward`` off they read plain tensors. This needs the
    whole model in memory on every rank.
    """
    if not is_fsdp(model):
        yield
        return
    from torch.distributed.fsdp import FSDPModule

    modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    model.set_reshard_after_forward(False)  # type: ignore[operator]
    for m in modules:
        m.unshard()
    try:
        yield
    finally:
        for m in modules:
            m.reshard()
        # Back to fully_shard's defaults (as wrap_model used them): layers reshard
        # after forward, the root keeps its parameters for the backward pass.
        model.set_reshard_after_forward(True)  # type: ignore[operator]
        model.set_reshard_after_forward(False, recurse=False)  # type: ignore[operator]


def grad_norm(parameters: Sequence[nn.Parameter]) -> float:
    """The total 2-norm of the gradients (over all shards under FSDP)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    norm = torch.nn.utils.get_total_norm(grads)
    return float(_full(norm))


def clip_grad_norm(parameters: Sequence[nn.Parameter], max_norm: float) -> float:
    """``clip_grad_norm_``, returning the total norm before clipping as a float.

    Sharded (DTensor) gradients are scaled by a plain float computed from the
    global norm, so no local tensor meets a DTensor in one operation.
    """
    if not any(callable(getattr(p.grad, "full_tensor", None)) for p in parameters):
        return float(torch.nn.utils.clip_grad_norm_(parameters, max_norm))
    norm = grad_norm(parameters)
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:  # False for a NaN norm too: that update is skipped anyway
        for p in parameters:
            if p.grad is not None:
                p.grad.mul_(coef)
    return norm


def scaled_grad_norm(parameters: Iterable[nn.Parameter], factor: float, max_norm: float) -> float:
    """Multiply every gradient by ``factor``, then clip to ``max_norm`` (``0``: no clipping);
    the total norm before clipping."""
    params = [p for p in parameters if p.grad is not None]
    for p in params:
        p.grad.mul_(factor)  # type: ignore[union-attr]
    return clip_grad_norm(params, max_norm) if max_norm > 0 else grad_norm(params)


def _full(t: Tensor) -> Tensor:
    full_tensor = getattr(t, "full_tensor", None)  # a DTensor under FSDP2
    return full_tensor() if callable(full_tensor) else t


def _local(t: Tensor) -> Tensor:
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


# -- full state dicts (checkpoints in the single-process format) ----------------------


def all_finite(parameters: Sequence[Tensor], ctx: DistContext) -> bool:
    """No NaN or inf in any parameter (this rank's shards; then over ranks)."""
    local = all(bool(torch.isfinite(_local(p)).all()) for p in parameters)
    return not ctx.any(not local)
