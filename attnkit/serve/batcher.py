"""Dynamic batching: one worker thread owns the model; requests wait on asyncio futures.

Every model call of the server runs in the worker thread (torch is used from one
thread only). With ``workers`` > 1 (``serve --engine ctranslate2 --engine-workers
N``: a ``run_batch`` that is safe to call from several threads at once), that
many threads form and run batches side by side, so a batch forms while another
decodes and each goes whole to its own decoder; plain jobs and continuous runs
(the attnkit model's work) still run one at a time. Three kinds of work go
through the queue:

* batchable items (``submit``): a request's token-id sources under a batching
  ``key`` (for translation a ``TranslationBatch``: its beam, alpha, nbest). The worker takes the
  oldest item, then, for up to ``max_wait_ms`` after that item arrived, adds
  later items with the *same* key while the batch stays within ``max_tokens``
  (the sum of each item's ``cost``, e.g. source tokens x beam) and
  ``max_sentences``. Items with another key stay queued, in order, for a later
  batch. The whole batch is decoded by one ``run_batch(key, payloads)`` call.
* plain jobs (``call``): a function run alone (generation, fill-mask, explorer
  passes), in arrival order with the batches.
* continuous items (``submit`` under a key given in ``continuous``): the
  worker hands the oldest to that key's runner (``ContinuousRun``), which may
  ``take`` more of the same key between its steps, oldest first, while they
  fit (the first that does not fit, or an item of another key ahead in the
  queue, stops the taking: no overtaking), and answers each one as soon as it
  is done (``Admitted.finish``). Iteration-level scheduling of generation
  (``attnkit.serve.continuous``) runs this way.

Under load the worker is busy while requests arrive, so the oldest item has
usually waited longer than ``max_wait_ms`` already and the batch is formed at
once from everything compatible that is queued: batches grow with concurrency
and an idle server adds at most ``max_wait_ms`` of latency.

Results go back with ``loop.call_soon_threadsafe``. Every item carries a
``RequestHandle`` (``attnkit.serve.handles``): a request that is cancelled
(its client went away, its deadline passed, the server is stopping) is
answered with ``RequestCancelled`` at once, dropped from the queue before its
batch forms, and, if it is already running, stopped at the next decoding step
by the work itself (``attnkit.serve.cancellable``); what a cancelled item's
rows produce is never handed back. ``stop`` cancels everything queued and
running, so the worker is free within one decoding step.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar, cast

from attnkit.serve.batch_types import (
    Admitted,
    BatcherClosed,
    BatcherStats,
    BatchInfo,
    ContinuousRun,
    QueuedItem,
    RunBatch,
)
from attnkit.serve.handles import (
    CLIENT_GONE,
    SHUTTING_DOWN,
    CancelReason,
    RequestCancelled,
    RequestHandle,
)

T = TypeVar("T")

# The records live in ``attnkit.serve.batch_types``; importable from here as before.
__all__ = ["Admitted", "BatchInfo", "BatcherClosed", "ContinuousRun", "DynamicBatcher", "RunBatch"]


class DynamicBatcher:
    """Groups compatible requests into one ``run_batch`` call, in one worker thread.

    Args:
        run_batch: ``run_batch(key, payloads, handles) -> results`` (``RunBatch``),
            called in the worker thread.
        max_tokens: token budget of a batch (sum of the items' ``cost``); an item
            larger than the budget runs alone.
        max_wait_ms: how long the oldest item may wait for company.
        max_sentences: sentences per batch at most.
        init: called once in each worker thread before any work (e.g. torch settings).
        continuous: runners of the keys whose items join and leave a running batch.
        workers: threads that form and run batches in parallel (``run_batch``
            must then be thread-safe); jobs and continuous runs take turns.
    """

    def __init__(
        self,
        run_batch: RunBatch,
        *,
        max_tokens: int = 8192,
        max_wait_ms: float = 5.0,
        max_sentences: int = 128,
        init: Callable[[], None] | None = None,
        continuous: dict[Hashable, ContinuousRun] | None = None,
        workers: int = 1,
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens: must be >= 1, got {max_tokens}")
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms: must be >= 0, got {max_wait_ms}")
        if max_sentences < 1:
            raise ValueError(f"max_sentences: must be >= 1, got {max_sentences}")
        if workers < 1:
            raise ValueError(f"workers: must be >= 1, got {workers}")
        self.run_batch = run_batch
        self.max_tokens = max_tokens
        self.max_wait = max_wait_ms / 1000.0
        self.max_sentences = max_sentences
        self.stats = BatcherStats()
        self._init = init
        self._continuous = dict(continuous or {})
        self._pending: deque[QueuedItem] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._running: list[QueuedItem] = []
        self.workers = workers
        self._threads: list[threading.Thread] = []
        self._exclusive = threading.Lock()  # jobs and continuous runs: one at a time

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> None:
        if self._threads:
            return
        names = ["attnkit-model"] + [f"attnkit-model-{i}" for i in range(1, self.workers)]
        self._threads = [threading.Thread(target=self._work, name=n, daemon=True) for n in names]
        for thread in self._threads:
            thread.start()

    def close(self, reason: CancelReason = SHUTTING_DOWN) -> None:
        """Refuse new work and cancel everything queued and running (any thread)."""
        with self._cond:
            self._closing = True
            items = [*self._pending, *self._running]
            self._pending = deque()
            self._cond.notify_all()
        for item in items:
            item.handle.cancel(reason)

    def stop(self, timeout: float = 30.0) -> None:
        """``close``, then join the workers (free within one decoding step of the work)."""
        self.close()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = []

    def pending(self) -> int:
        """Items waiting for the worker (not counting the batch it is running)."""
        with self._cond:
            return len(self._pending)

    # -- submitting ------------------------------------------------------------------

    async def submit(
        self,
        key: Hashable,
        payload: object,
        *,
        cost: int,
        sentences: int = 1,
        handle: RequestHandle | None = None,
    ) -> tuple[object, BatchInfo]:
        """Queue a batchable item; return its result and how it was batched.

        Raises ``RequestCancelled`` as soon as ``handle`` is cancelled.
        """
        if key is None:
            raise ValueError("key: None is reserved for plain jobs")
        return await self._enqueue(key, payload, max(1, cost), max(1, sentences), handle)

    async def call(
        self, fn: Callable[[], T], *, handle: RequestHandle | None = None
    ) -> tuple[T, BatchInfo]:
        """Run ``fn()`` alone in the worker thread; return its result.

        ``fn`` should obey ``handle`` itself (e.g. decode through a
        ``CancellableStepper``); the batcher skips it if it is cancelled before
        it starts and never returns its result once cancelled.
        """
        result, info = await self._enqueue(None, fn, 1, 1, handle)
        return cast(T, result), info  # what ``fn()`` returned (``_run``)

    async def _enqueue(
        self,
        key: Hashable | None,
        payload: object,
        cost: int,
        sentences: int,
        handle: RequestHandle | None,
    ) -> tuple[object, BatchInfo]:
        loop = asyncio.get_running_loop()
        handle = handle or RequestHandle()
        item = QueuedItem(key, payload, cost, sentences, loop.create_future(), loop, handle)
        with self._cond:
            if self._closing or not self._threads:
                raise BatcherClosed("the model worker is not running")
            self._pending.append(item)
            self._cond.notify_all()
        handle.on_cancel(lambda reason: item.settle(None, RequestCancelled(reason)))
        left = handle.remaining()
        # At the deadline, reading ``cancelled`` cancels the handle, which answers here.
        timer = None if left is None else loop.call_later(max(0.0, left), lambda: handle.cancelled)
        try:
            result = await item.future
        except asyncio.CancelledError:  # the coroutine itself was cancelled: drop the work
            handle.cancel(CLIENT_GONE)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        return result

    # -- the worker ------------------------------------------------------------------

    def _work(self) -> None:
        if self._init is not None:
            self._init()
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                first = self._pending.popleft()
            if self._dropped(first):
                continue
            if first.key is None:
                with self._exclusive:
                    self.stats.jobs += 1
                    self._run(None, [first])
                continue
            if first.key in self._continuous:
                with self._exclusive:
                    self._run_continuous(first)
                continue
            batch = self._gather(first)
            key: Hashable = first.key
            with self._cond:
                self.stats.batches += 1
                self.stats.batched_requests += len(batch)
                self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
            self._run(key, batch)

    def _gather(self, first: QueuedItem) -> list[QueuedItem]:
        """``first`` and the compatible queued items that fit, waiting until its deadline."""
        batch, cost, sentences = [first], first.cost, first.sentences
        deadline = first.enqueued + self.max_wait
        with self._cond:
            while True:
                full = sentences >= self.max_sentences or cost >= self.max_tokens
                kept: deque[QueuedItem] = deque()
                for item in self._pending:
                    if self._dropped(item):
                        continue
                    if full or item.key != first.key:
                        kept.append(item)
                    elif (
                        cost + item.cost > self.max_tokens
                        or sentences + item.sentences > self.max_sentences
                    ):
                        full = True  # first come, first served: no overtaking
                        kept.append(item)
                    else:
                        batch.append(item)
                        cost += item.cost
                        sentences += item.sentences
                self._pending = kept
                left = deadline - time.monotonic()
                if full or left <= 0 or self._closing:
                    return batch
                self._cond.wait(left)

    def _dropped(self, item: QueuedItem) -> bool:
        """Whether ``item`` was cancelled before it ran (its waiter was answered already)."""
        if item.handle.cancelled or item.future.cancelled():
            with self._cond:  # re-entrant: callers may hold it already
                self.stats.dropped_queued += 1
            return True
        return False

    def _run_continuous(self, first: QueuedItem) -> None:
        """Hand ``first`` to its key's runner, with ``take`` for the items that join later."""
        run = self._continuous[first.key]
        start = time.monotonic()
        open_items: dict[int, QueuedItem] = {}
        self.stats.batches += 1

        def admit(item: QueuedItem) -> Admitted:
            with self._cond:
                self._running.append(item)
                closing = self._closing
            if closing:
                item.handle.cancel(SHUTTING_DOWN)
            open_items[id(item)] = item
            self.stats.batched_requests += 1
            self.stats.largest_batch = max(self.stats.largest_batch, len(open_items))

            def finish(value: object, error: BaseException | None) -> None:
                if open_items.pop(id(item), None) is None:
                    return  # answered already
                with self._cond:
                    self._running = [i for i in self._running if i is not item]
                now = time.monotonic()
                if item.handle.cancelled:
                    self.stats.cancelled_running += 1
                    return
                info = BatchInfo((start - item.enqueued) * 1000.0, (now - start) * 1000.0,
                                 len(open_items) + 1, 1)  # fmt: skip
                item.settle(None if error is not None else (value, info), error)

            return Admitted(item.payload, item.handle, finish)

        def take(fits: Callable[[object], bool]) -> Admitted | None:
            with self._cond:
                while self._pending:
                    item = self._pending[0]
                    if self._dropped(item):
                        self._pending.popleft()
                        continue
                    if item.key != first.key or self._closing or not fits(item.payload):
                        return None
                    self._pending.popleft()
                    break
                else:
                    return None
            return admit(item)

        try:
            run(admit(first), take)
        except Exception as e:  # handed to every request still in the batch
            for item in list(open_items.values()):
                open_items.pop(id(item))
                item.settle(None, e)
        finally:
            with self._cond:
                self._running = [i for i in self._running if id(i) not in open_items]
            for item in list(open_items.values()):  # the runner forgot them: never hang
                item.settle(None, RuntimeError("the continuous runner left a request unanswered"))
            with self._cond:
                self.stats.busy_s += time.monotonic() - start

    def _run(self, key: Hashable | None, items: list[QueuedItem]) -> None:
        """Run a job (``key`` None) or a batch; hand each item its result or the error."""
        start = time.monotonic()
        results: Sequence[object] = ()
        error: BaseException | None = None
        with self._cond:
            self._running.extend(items)
            closing = self._closing  # close() came between taking them and here
        if closing:
            for item in items:
                item.handle.cancel(SHUTTING_DOWN)
        try:
            if key is None:
                job = cast(Callable[[], object], items[0].payload)  # ``call``'s function
                results = [job()]
            else:
                handles = [i.handle for i in items]
                results = self.run_batch(key, [i.payload for i in items], handles)
            if len(results) != len(items):
                raise RuntimeError(f"run_batch returned {len(results)} results for {len(items)}")
        except Exception as e:  # handed to every request of the batch
            error = e
        finally:
            with self._cond:
                ran = {id(i) for i in items}
                self._running = [i for i in self._running if id(i) not in ran]
        end = time.monotonic()
        with self._cond:
            self.stats.busy_s += end - start
        sentences = sum(i.sentences for i in items)
        for n, item in enumerate(items):
            info = BatchInfo(
                queue_ms=(start - item.enqueued) * 1000.0,
                compute_ms=(end - start) * 1000.0,
                batch_requests=len(items),
                batch_sentences=sentences,
            )
            if item.handle.cancelled:  # answered with its reason; its rows were cut short
                self.stats.cancelled_running += 1
                continue
            value = None if error is not None else (results[n], info)
            item.settle(value, error)
