"""Guards in front of the app: body size, body read time, header read time.

``RequestGuard`` is a plain ASGI middleware. Before the app sees a request
with a body (POST) it checks the ``Content-Type`` (JSON only: 415 otherwise) and
``Content-Length`` (over the limit: 413 without reading the body) and
then reads the body itself, counting the bytes as they stream in (chunked
uploads have no length to check) and giving the whole body ``read_timeout``
seconds: a client that sends half a body and stalls gets a 408 and its
connection closed, and it never held anything but its own coroutine. The app
then reads the buffered body.

``HeaderTimeoutH11`` is uvicorn's h11 protocol with one more timer: a
connection that has not completed a request's headers within
``header_timeout`` seconds (from connecting, or from its previous response) is
closed. uvicorn itself only times out idle keep-alive connections. It also
answers what uvicorn answers by itself in the API's JSON shape rather than
plain text: malformed HTTP (400) and overload past ``--max-connections`` (503).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from attnkit import jsonio
from attnkit.serve.error_shape import JSONObject, error_body

# ASGI scopes and messages hold values of every type (Starlette and uvicorn type them so).
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["HeaderTimeoutH11", "RequestGuard", "header_timeout_protocol", "send_error", "send_json"]


async def send_error(send: Send, scope: Scope, status: int, message: str) -> None:
    """Answer ``message`` in the error shape of the request's endpoint, closing the connection."""
    await send_json(send, status, error_body(scope.get("path", ""), message, status), close=True)


async def send_json(send: Send, status: int, body: JSONObject, *, close: bool) -> None:
    data = jsonio.dumps(body).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class RequestGuard:
    """Refuse non-JSON bodies (415), bodies over ``max_bytes`` (413) or slower than
    ``read_timeout`` s (408)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, read_timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout = read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared, ctype = None, b""
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
            elif name == b"content-type":
                ctype = value.split(b";")[0].strip().lower()
        if scope.get("method") == "POST" and ctype != b"application/json":
            shown = ctype.decode("latin-1") or "none"
            message = f"Content-Type: expected application/json, got {shown}"
            await send_error(send, scope, 415, message)
            return
        if declared is not None and declared < 0:
            await send_error(send, scope, 400, "Content-Length: not a number")
            return
        if declared is not None and declared > self.max_bytes:
            message = f"body: {declared} bytes (Content-Length); the limit is {self.max_bytes}"
            await send_error(send, scope, 413, message)
            return
        try:
            body = await asyncio.wait_for(self._read(receive), self.read_timeout)
        except _TooLarge as e:
            await send_error(send, scope, 413, str(e))
            return
        except TimeoutError:
            message = f"body: not received within {self.read_timeout:g} s"
            await send_error(send, scope, 408, message)
            return
        except _Disconnected:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _TooLarge(
                    f"body: more than {self.max_bytes} bytes; the limit is {self.max_bytes}"
                )
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


class _TooLarge(Exception):
    pass


class _Disconnected(Exception):
    pass


MALFORMED_HTTP = (
    "malformed HTTP request: expected HTTP/1.1 with a valid request line, headers "
    "(at most 16 KiB, Host included) and Content-Length or chunks"
)


class HeaderTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, closing connections that are slow to send headers, and
    answering malformed HTTP (400) and overload (503) as JSON."""

    header_timeout: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # uvicorn's, passed through
        super().__init__(*args, **kwargs)
        # uvicorn's own check answers in plain text: take it over (same rule, JSON answer).
        self._limit, self.limit_concurrency = self.limit_concurrency, None
        app = self.app

        async def limited(scope: Scope, receive: Receive, send: Send) -> None:
            # This request's task is already counted in self.tasks, hence ">" for tasks.
            limit = self._limit
            if limit is not None and (len(self.connections) >= limit or len(self.tasks) > limit):
                message = f"overloaded: {limit} connections at once at most (--max-connections)"
                await send_error(send, scope, 503, message)
                return
            await app(scope, receive, send)

        self.app = limited

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 cannot parse, as JSON (uvicorn's is plain text)."""
        data = jsonio.dumps({"error": MALFORMED_HTTP}).encode("utf-8")
        headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                   (b"content-length", str(len(data)).encode())]  # fmt: skip
        try:
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                          h11.Data(data=data), h11.EndOfMessage()):  # fmt: skip
                self.transport.write(self.conn.send(event) or b"")
        except h11.LocalProtocolError:  # an answer had already begun: just close
            pass
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout, self._expire)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expire(self) -> None:
        # A request in progress (headers complete, response not yet sent) is left alone.
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()


def header_timeout_protocol(seconds: float) -> type[HeaderTimeoutH11]:
    """A ``HeaderTimeoutH11`` subclass with its own ``header_timeout`` (uvicorn's ``http=``)."""
    return type("HeaderTimeoutH11", (HeaderTimeoutH11,), {"header_timeout": float(seconds)})
