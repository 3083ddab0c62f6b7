"""Clients that stop reading: a connection whose answer is not taken for a while is cut.

When a client stops reading, the kernel's socket buffers fill, then the
transport's write buffer passes its high-water mark and asyncio calls the
protocol's ``pause_writing``; every ``send`` of the response then waits. Left
alone it waits until the client reads again or goes away, which may be never,
holding the request (and, for a streamed generation, its rows of the batch).
Linux grows a socket's send buffer by itself (to 4 MiB), far past a whole
1,024-token stream of 8 choices (~2 MB), so the server never even noticed:
each connection's ``SO_SNDBUF`` is set to ``SEND_BUFFER_BYTES`` (the kernel
doubles it), which is ample for token streams and JSON answers on a LAN and
makes a client that stops reading show within a few hundred kilobytes.

``StallTimeoutH11`` (``HeaderTimeoutH11`` with one more timer) aborts the
connection when writing has stayed paused ``stall_timeout`` seconds: the
request sees a disconnect, its handle is cancelled (``handles.watch_disconnect``,
the stream's own cleanup), and its rows leave the batch at the next step. A
streamed answer also stops its generation itself once its chunks have waited
that long (``openai_api``'s ``StreamBacklog``), which frees the rows even
before the buffers are full; this cut then closes the connection. ``abort``,
not ``close``: closing waits to flush a buffer that nobody reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

from attnkit.serve.handles import CancelReason, RequestHandle
from attnkit.serve.limits import HeaderTimeoutH11

# A piece of a streamed answer: (choice index, its new text, its finish reason if done).
Delta = tuple[int, str, str | None]

__all__ = [
    "Delta",
    "DEFAULT_STALL_TIMEOUT_S",
    "MAX_BACKLOG_CHUNKS",
    "SEND_BUFFER_BYTES",
    "StallTimeoutH11",
    "StreamBacklog",
    "server_protocol",
    "stalled",
]

DEFAULT_STALL_TIMEOUT_S = 5.0
# Chunks a stream may have waiting at most (n=8 x 1,024 tokens is 8,192 chunks in all):
# they only pile up while the connection is paused, which the timeout bounds already.
MAX_BACKLOG_CHUNKS = 8192
SEND_BUFFER_BYTES = 64 * 1024  # a connection's SO_SNDBUF (Linux doubles it; no autotuning)


class StallTimeoutH11(HeaderTimeoutH11):
    """``HeaderTimeoutH11`` that aborts a connection whose writes stay paused too long."""

    stall_timeout: float = DEFAULT_STALL_TIMEOUT_S
    _stall_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # a platform without it: the kernel's own size
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        super().connection_made(transport)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall_timer is None:
            self._stall_timer = self.loop.call_later(self.stall_timeout, self._stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._stop_stall_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_stall_timer()
        super().connection_lost(exc)

    def _stop_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def abort_if_paused(self) -> None:
        """Cut the connection now if its writes are paused (at shutdown: nobody reads them)."""
        if self._stall_timer is not None:
            self._stalled()

    def _stalled(self) -> None:
        self._stall_timer = None
        self.transport.abort()


def server_protocol(header_timeout: float, stall_timeout: float) -> type[StallTimeoutH11]:
    """The h11 protocol class ``attnkit serve`` gives uvicorn (``http=``): header and stall
    timeouts in seconds."""
    attrs: dict[str, float] = {"header_timeout": float(header_timeout),
                             "stall_timeout": float(stall_timeout)}  # fmt: skip
    return type("StallTimeoutH11", (StallTimeoutH11,), attrs)


def stalled(seconds: float) -> CancelReason:
    """Why a stream was stopped: its client left its chunks unread ``seconds`` (or more)."""
    return CancelReason(
        f"the client did not read the stream for {seconds:g} s (--stall-timeout)", 408
    )


class StreamBacklog:
    """A streamed answer's chunks on their way to the client, bounded in time and number.

    The worker hands chunks over (``put``, in the event loop) as it draws tokens;
    the response takes them (``get``) as fast as the connection accepts them. When
    the oldest chunk waiting has waited ``stall_timeout`` seconds since the
    response last took one, or ``max_chunks`` are waiting, the request's handle is
    cancelled with ``stalled``: its rows leave the batch at the next step, and the
    queue stops growing (nothing more is drawn for it).
    """

    def __init__(
        self, handle: RequestHandle, stall_timeout: float, max_chunks: int = MAX_BACKLOG_CHUNKS
    ) -> None:
        self.handle, self.stall_timeout, self.max_chunks = handle, stall_timeout, max_chunks
        self._queue: asyncio.Queue[Delta | None] = asyncio.Queue()
        self._since = time.monotonic()  # when the response last took a chunk, or found none

    def put(self, item: Delta) -> None:
        """Queue ``item`` (in the event loop); stop the request if its client stalls."""
        now = time.monotonic()
        if self._queue.empty():
            self._since = now
        elif now - self._since > self.stall_timeout or self._queue.qsize() >= self.max_chunks:
            self.handle.cancel(stalled(self.stall_timeout))
        self._queue.put_nowait(item)

    def close(self) -> None:
        """No more pieces: ``get`` returns ``None`` once it has handed out the rest."""
        self._queue.put_nowait(None)

    async def get(self) -> Delta | None:
        """The next piece (``None``: the end), waiting for it."""
        item = await self._queue.get()
        self._since = time.monotonic()
        return item
