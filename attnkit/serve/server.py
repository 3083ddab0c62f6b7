"""Running the app under uvicorn, with a shutdown that cancels what is running.

uvicorn's graceful shutdown (SIGTERM, SIGINT) stops accepting connections,
then waits for every request in flight to be answered, and only then runs the
app's lifespan shutdown. With a 1024-token generation in the model worker that
wait is the generation's length (it took over 90 s). ``CancellingServer``
calls ``on_shutdown`` the moment shutdown begins: the batcher cancels every
queued and running request (``attnkit.serve.handles``), their clients get a
503 within one decoding step, the connections close, and uvicorn's own wait
ends; ``timeout_graceful_shutdown`` is a backstop for anything else.

``build_server`` holds every uvicorn setting ``attnkit serve`` uses.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import uvicorn

from attnkit.serve.limits import header_timeout_protocol

__all__ = ["GRACEFUL_SHUTDOWN_S", "CancellingServer", "build_server"]

GRACEFUL_SHUTDOWN_S = 3  # after cancelling: how long uvicorn may still wait for answers


class CancellingServer(uvicorn.Server):
    """A ``uvicorn.Server`` that calls ``on_shutdown()`` as soon as it starts shutting down."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.on_shutdown()
        await super().shutdown(sockets)


def build_server(
    app: Any,
    *,
    on_shutdown: Callable[[], None],
    host: str,
    port: int,
    read_timeout: float,
    max_connections: int,
    log_level: str = "warning",
) -> CancellingServer:
    """The uvicorn server for ``app``: h11 with header timeouts and JSON errors, no
    WebSocket upgrades (the API has none), a cancelling shutdown."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=header_timeout_protocol(read_timeout),
        ws="none",
        log_level=log_level,
        limit_concurrency=max_connections,
        timeout_keep_alive=5,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        server_header=False,
    )
    return CancellingServer(config, on_shutdown)
