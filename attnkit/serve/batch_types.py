"""What the model worker's queue holds and hands back: items, results, counters.

The records of ``attnkit.serve.batcher`` (the worker itself lives there): a
queued item and how its waiter is answered from the worker thread, what a
request learns about its batch (``BatchInfo``), the worker's counters
(``BatcherStats``), and the interface of a continuous runner (``Admitted``,
``Take``, ``ContinuousRun``) that ``attnkit.serve.continuous`` implements.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from attnkit.serve.handles import RequestHandle

__all__ = [
    "Admitted",
    "BatchInfo",
    "BatcherClosed",
    "BatcherStats",
    "ContinuousRun",
    "QueuedItem",
    "RunBatch",
    "Take",
    "resolve",
]

T = TypeVar("T")

RunBatch = Callable[[Hashable, list[object], list[RequestHandle]], Sequence[object]]
"""``run_batch(key, payloads, handles) -> results``: one result per payload; ``handles[i]``
is the request of ``payloads[i]`` (for the work to check at step boundaries)."""


class BatcherClosed(RuntimeError):
    """The server is shutting down; the request was not run."""


@dataclass(frozen=True)
class BatchInfo:
    """How one request was run: time queued, time of its batch, batch size."""

    queue_ms: float
    compute_ms: float
    batch_requests: int
    batch_sentences: int


@dataclass
class QueuedItem:
    key: Hashable | None  # None: a plain job
    payload: object  # the payload of a batchable item; the function of a job
    cost: int
    sentences: int
    future: asyncio.Future[tuple[object, BatchInfo]]
    loop: asyncio.AbstractEventLoop
    handle: RequestHandle
    enqueued: float = field(default_factory=time.monotonic)

    def settle(self, value: tuple[object, BatchInfo] | None, error: BaseException | None) -> None:
        """Hand the result (or error) to the waiting coroutine, from any thread."""
        try:
            self.loop.call_soon_threadsafe(resolve, self.future, value, error)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


@dataclass
class Admitted:
    """A continuous item in the runner's hands: answer it once with ``finish``."""

    payload: object  # what was submitted under the runner's key (the runner knows its type)
    handle: RequestHandle
    finish: Callable[[object, BaseException | None], None]


Take = Callable[[Callable[[object], bool]], "Admitted | None"]
ContinuousRun = Callable[[Admitted, Take], None]
"""``run(first, take)``: serve ``first`` and what ``take(fits)`` hands over (the oldest
queued item of the same key, if ``fits(payload)``; else ``None``) until all are finished."""


@dataclass
class BatcherStats:
    """Counters since start; ``busy_s`` is the workers' time in batches and jobs, summed
    over the workers (with N workers it can reach N times the wall time)."""

    batches: int = 0
    batched_requests: int = 0
    jobs: int = 0
    largest_batch: int = 0
    busy_s: float = 0.0
    dropped_queued: int = 0  # cancelled before the worker started them
    cancelled_running: int = 0  # cancelled while their batch or job ran


def resolve(future: asyncio.Future[T], value: T | None, error: BaseException | None) -> None:
    if future.done():  # cancelled: the client went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert value is not None  # settled with a value or an error
        future.set_result(value)
