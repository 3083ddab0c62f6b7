"""Running the app under uvicorn, with a shutdown that cancels what is running.

uvicorn's graceful shutdown (SIGTERM, SIGINT) stops accepting connections,
then waits for every request in flight to be answered, and only then runs the
app's lifespan shutdown. With a 1024-token generation in the model worker that
wait is the generation's length (it took over 90 s). ``CancellingServer``
calls ``on_shutdown`` the moment shutdown begins: the batcher cancels every
queued and running request (``attnkit.serve.handles``), their clients get a
503 within one decoding step, the connections close, and uvicorn's own wait
ends; ``timeout_graceful_shutdown`` is a backstop for anything else. A
connection whose client stopped reading (its writes paused: ``stall``) is cut
at once, since it would never take its answer, and any connection still open
half a second before that backstop is cut too (an answer sent but never read
would otherwise hold uvicorn's wait to its end and an error line).

``build_server`` holds every uvicorn setting ``attnkit serve`` uses, and puts the
access checks in front of the app (``guard_access``: ``Host``, then the API key).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence

import uvicorn

from attnkit.serve.api_key import ApiKeyCheck
from attnkit.serve.host_check import HostCheck
from attnkit.serve.limits import ASGIApp
from attnkit.serve.stall import DEFAULT_STALL_TIMEOUT_S, StallTimeoutH11, server_protocol

__all__ = ["GRACEFUL_SHUTDOWN_S", "CancellingServer", "build_server", "guard_access"]

GRACEFUL_SHUTDOWN_S = 3  # after cancelling: how long uvicorn may still wait for answers


class CancellingServer(uvicorn.Server):
    """A ``uvicorn.Server`` that calls ``on_shutdown()`` as soon as it starts shutting down."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.on_shutdown()
        # A client that stopped reading would hold uvicorn's wait to its end, and uvicorn
        # would then cancel its request mid-answer (a traceback): cut it now, and cut
        # what is still open (an answer nobody takes) just before uvicorn would give up.
        for connection in list(self.server_state.connections):
            if isinstance(connection, StallTimeoutH11):
                connection.abort_if_paused()
        late = asyncio.get_running_loop().call_later(
            GRACEFUL_SHUTDOWN_S - 0.5, self._abort_open_connections
        )
        try:
            await super().shutdown(sockets)
        finally:
            late.cancel()

    def _abort_open_connections(self) -> None:
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()


def guard_access(
    app: ASGIApp, *, host: str, allowed_hosts: Sequence[str] = (), api_key: str | None = None
) -> ASGIApp:
    """``app`` behind the ``Host`` check (``host``: the bound address; ``allowed_hosts``
    canonical, ``*`` for any) and, with ``api_key``, the bearer-token check."""
    inner = ApiKeyCheck(app, api_key) if api_key else app
    return HostCheck(inner, bound=host, allowed=allowed_hosts)


def build_server(
    app: ASGIApp,
    *,
    on_shutdown: Callable[[], None],
    host: str,
    port: int,
    read_timeout: float,
    max_connections: int,
    log_level: str = "warning",
    stall_timeout: float = DEFAULT_STALL_TIMEOUT_S,
    allowed_hosts: Sequence[str] = (),
    api_key: str | None = None,
) -> CancellingServer:
    """The uvicorn server for ``app`` behind ``guard_access``: h11 with header and stall
    timeouts and JSON errors, no WebSocket upgrades (the API has none), a cancelling
    shutdown."""
    config = uvicorn.Config(
        guard_access(app, host=host, allowed_hosts=allowed_hosts, api_key=api_key),
        host=host,
        port=port,
        http=server_protocol(read_timeout, stall_timeout),
        ws="none",
        log_level=log_level,
        limit_concurrency=max_connections,
        timeout_keep_alive=5,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        server_header=False,
    )
    return CancellingServer(config, on_shutdown)
