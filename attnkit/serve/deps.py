"""What every model route shares: its request handle (a FastAPI dependency) and timing.

Each model request gets a ``RequestHandle`` (``attnkit.serve.handles``) with the
server's time budget; a task watching the connection cancels it when the
client disconnects, and the batcher and the decoding steps obey it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated, TypedDict

from fastapi import Depends, Request

from attnkit.serve.batch_types import BatchInfo
from attnkit.serve.handles import RequestHandle, watch_disconnect
from attnkit.serve.settings import ServeSettings

__all__ = ["Handle", "TimingJSON", "timing"]


class TimingJSON(TypedDict):
    """A response's ``timing`` (``schemas.Timing``)."""

    queue_ms: float
    compute_ms: float
    total_ms: float
    batch_requests: int
    batch_sentences: int


def timing(info: BatchInfo, started: float) -> TimingJSON:
    """A response's ``timing``: how the request was queued and batched."""
    return {
        "queue_ms": round(info.queue_ms, 3),
        "compute_ms": round(info.compute_ms, 3),
        "total_ms": round((time.monotonic() - started) * 1000.0, 3),
        "batch_requests": info.batch_requests,
        "batch_sentences": info.batch_sentences,
    }


async def _request_handle(request: Request) -> AsyncIterator[RequestHandle]:
    """This request's handle, cancelled if its client disconnects before the answer."""
    settings: ServeSettings = request.app.state.settings
    handle = RequestHandle(timeout=settings.request_timeout)
    watcher = watch_disconnect(request.receive, handle)
    try:
        yield handle
    finally:
        watcher.cancel()


Handle = Annotated[RequestHandle, Depends(_request_handle)]
