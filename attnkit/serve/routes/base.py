"""What every router builds on: the server's shared parts, the router declaration, batch kinds.

* ``ServerParts``: what ``create_app`` builds once and hands to every router
  (the engine, the batcher, the settings, the continuous generator).
* ``ServedRouter``: one router per kind of checkpoint (``attnkit.serve.routes``):
  its routes, whether the engine offers it, the 400 its routes answer on a
  model that does not fit, and which of its endpoints a 404 lists.
* ``BatchKind``: a batcher key that runs its own batch. Each router owns the
  kinds it submits (``translation.TranslationBatch``, ``encoder.ClassifyBatch``,
  ...): a frozen dataclass whose fields are what a batch must share (beam,
  pooling, ...), so equal keys batch together, and whose ``run`` decodes the
  payloads of one batch. ``run_batches`` is the batcher's one ``run_batch``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast, runtime_checkable

from fastapi import APIRouter

from attnkit.serve.batch_types import BatchInfo, RunBatch
from attnkit.serve.batcher import DynamicBatcher
from attnkit.serve.continuous import ContinuousGenerator
from attnkit.serve.handles import RequestHandle
from attnkit.serve.model_host import ModelHost, RequestError
from attnkit.serve.settings import ServeSettings

__all__ = [
    "BatchKind",
    "ServedRouter",
    "ServerParts",
    "run_batches",
    "submit",
    "token_budget",
]

P = TypeVar("P")
R = TypeVar("R")
P_contra = TypeVar("P_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True)
class ServerParts:
    """What the routers share (``create_app`` builds it once)."""

    engine: ModelHost
    batcher: DynamicBatcher
    settings: ServeSettings
    generator: ContinuousGenerator | None  # continuous batching of generation, if it fits
    started_at: float  # time.time() when the app was built (/v1/health's uptime)


@runtime_checkable
class BatchKind(Hashable, Protocol[P_contra, R_co]):
    """A batcher key that runs its batch: ``run(engine, payloads, handles)``, one result
    per payload (``None`` for a request cancelled before its pass: never handed back)."""

    def run(
        self,
        engine: ModelHost,
        payloads: Sequence[P_contra],
        handles: Sequence[RequestHandle],
    ) -> Sequence[R_co | None]: ...


def run_batches(engine: ModelHost) -> RunBatch:
    """The batcher's ``run_batch``: every key is a ``BatchKind`` that runs itself."""

    def run(key: Hashable, payloads: list[object], handles: list[RequestHandle]) -> list[object]:
        if not isinstance(key, BatchKind):
            raise TypeError(f"not a batch kind: {key!r}")
        return list(key.run(engine, payloads, handles))

    return run


async def submit(
    batcher: DynamicBatcher,
    kind: BatchKind[P, R],
    payload: P,
    *,
    cost: int,
    sentences: int = 1,
    handle: RequestHandle | None = None,
) -> tuple[R, BatchInfo]:
    """Queue ``payload`` in a batch of ``kind``; its result (what ``kind.run`` made of it)."""
    result, info = await batcher.submit(
        kind, payload, cost=cost, sentences=sentences, handle=handle
    )
    # The batcher hands back run's result for this payload; a request whose result is None
    # (cancelled) is answered with RequestCancelled instead, so None never comes back.
    return cast(R, result), info


def token_budget(settings: ServeSettings, requested: int, handle: RequestHandle, name: str) -> int:
    """``requested`` new tokens, if within the server's budget (else a 422 naming ``name``);
    the handle's ``max_new_tokens`` is set to it."""
    if requested > settings.max_new_tokens:
        raise RequestError(
            f"{name}: {requested} is over this server's limit of "
            f"{settings.max_new_tokens} (--max-new-tokens)"
        )
    handle.max_new_tokens = requested
    return requested


def _every_endpoint(engine: ModelHost, endpoint: str) -> bool:
    return True


@dataclass(frozen=True)
class ServedRouter:
    """One router of the server (module doc).

    ``build(parts)`` makes its routes (cheaply: a router the engine does not offer
    is built too, so that its endpoints answer ``refusal``'s 400 naming the right
    one, and appear in ``/docs``). ``offered(engine)``: whether the engine serves
    them; ``refusal(engine, endpoint)``: the 400 they answer when it does not (``None``:
    a router every engine offers); ``lists(engine, "POST /v1/x")``: whether a 404
    names that endpoint (a task head's endpoint, on a model without that head: no).
    """

    name: str
    build: Callable[[ServerParts], APIRouter]
    offered: Callable[[ModelHost], bool]
    refusal: Callable[[ModelHost, str], RequestError] | None = None
    lists: Callable[[ModelHost, str], bool] = field(default=_every_endpoint)
