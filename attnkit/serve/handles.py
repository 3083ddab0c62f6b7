"""Per-request handles: a cancel flag, a deadline and a token budget that the worker obeys.

A ``RequestHandle`` is made when a request arrives and travels with its work:
the event loop cancels it when the client disconnects or the server shuts
down; the deadline cancels it when the request has run past the server's time
budget; the model worker checks it when it takes the request from the queue
and at every decoding step (``attnkit.serve.cancellable``). Nothing in it is
specific to one endpoint or one kind of batching, so a scheduler that lets
requests join and leave a running batch at token boundaries can use the same
handles.

Thread safety: ``cancel`` may be called from any thread (the event loop, the
worker, a signal-driven shutdown); the first reason wins and the callbacks
registered with ``on_cancel`` run once, in the thread that cancelled.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

__all__ = [
    "CLIENT_GONE",
    "SHUTTING_DOWN",
    "CancelReason",
    "RequestCancelled",
    "RequestHandle",
    "time_budget",
    "watch_disconnect",
]


@dataclass(frozen=True)
class CancelReason:
    """Why a request stopped: a one-line message and the HTTP status to answer with."""

    message: str
    status: int


# 499: the status nginx logs for a client that closed its connection; nobody reads the answer.
CLIENT_GONE = CancelReason("the client disconnected", 499)
SHUTTING_DOWN = CancelReason("the server is shutting down", 503)


def time_budget(seconds: float) -> CancelReason:
    return CancelReason(
        f"the request ran past the server's time budget of {seconds:g} s (--request-timeout)", 503
    )


class RequestCancelled(Exception):
    """Raised where cancelled work stops; carries the reason (and its HTTP status)."""

    def __init__(self, reason: CancelReason) -> None:
        super().__init__(reason.message)
        self.reason = reason

    @property
    def status(self) -> int:
        return self.reason.status


class RequestHandle:
    """One request's cancel flag, deadline and token budget.

    Args:
        timeout: seconds from now after which the request is cancelled with
            ``time_budget(timeout)`` (``None``: no deadline).
        max_new_tokens: the tokens this request may generate, already capped
            by the server's ``--max-new-tokens`` (``None``: the search's own
            length limit, as for translation); what the request's decoding runs
            for, and what a scheduler reads to know when it leaves the batch.
    """

    def __init__(self, *, timeout: float | None = None, max_new_tokens: int | None = None) -> None:
        self.created = time.monotonic()
        self.timeout = timeout
        self.deadline = None if timeout is None else self.created + timeout
        self.max_new_tokens = max_new_tokens
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reason: CancelReason | None = None
        self._callbacks: list[Callable[[CancelReason], None]] = []

    def cancel(self, reason: CancelReason) -> bool:
        """Cancel with ``reason``; ``False`` (and nothing changes) if already cancelled."""
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            callbacks, self._callbacks = self._callbacks, []
        self._event.set()
        for callback in callbacks:
            callback(reason)
        return True

    @property
    def cancelled(self) -> bool:
        """Cancelled, or past the deadline (which cancels it now)."""
        if self._event.is_set():
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            assert self.timeout is not None
            self.cancel(time_budget(self.timeout))
            return True
        return False

    @property
    def reason(self) -> CancelReason | None:
        return self._reason

    def error(self) -> RequestCancelled:
        """The exception to raise for this cancelled request."""
        assert self._reason is not None, "error() of a handle that was not cancelled"
        return RequestCancelled(self._reason)

    def check(self) -> None:
        """Raise ``RequestCancelled`` if the request was cancelled or is past its deadline."""
        if self.cancelled:
            raise self.error()

    def remaining(self) -> float | None:
        """Seconds left before the deadline (``None``: no deadline)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def on_cancel(self, callback: Callable[[CancelReason], None]) -> None:
        """Call ``callback(reason)`` when cancelled (at once if it already is)."""
        with self._lock:
            reason = self._reason
            if reason is None:
                self._callbacks.append(callback)
        if reason is not None:
            callback(reason)


async def _cancel_on_disconnect(
    receive: Callable[[], Awaitable[Mapping[str, object]]], handle: RequestHandle
) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    handle.cancel(CLIENT_GONE)


def watch_disconnect(
    receive: Callable[[], Awaitable[Mapping[str, object]]], handle: RequestHandle
) -> asyncio.Future[None]:
    """A task cancelling ``handle`` when the client disconnects; cancel it once answered.

    ``receive`` is the request's ASGI receive: its body has been read by then, so
    the next message is the disconnect, or comes once the answer is sent.
    """
    return asyncio.ensure_future(_cancel_on_disconnect(receive, handle))
