"""The HTTP API on FastAPI: the app, built from one router per kind of checkpoint.

``create_app(engine, settings)`` returns the ASGI app (wrapped in ``RequestGuard``).
Every error a client can cause is ``{"error": "..."}`` on one line, naming the
field (or, for an endpoint that does not fit the loaded model, the endpoint
that does): ``attnkit.serve.errors``. Endpoints: see ``docs/serving.md`` or ``/docs``.

The routes are the routers' of ``attnkit.serve.routes`` (common, translation,
language model, encoder, summarization): each owns its endpoints and the batch
kinds it submits to the batcher, which runs every batch by its kind
(``routes.base.run_batches``). Each model request gets a ``RequestHandle``
(``attnkit.serve.deps``) with the server's time budget; a task watching the
connection cancels it when the client disconnects, and the batcher and the
decoding steps obey it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from attnkit.serve.batcher import DynamicBatcher
from attnkit.serve.continuous import GENERATE, ContinuousGenerator, supports
from attnkit.serve.errors import install_error_handlers
from attnkit.serve.limits import RequestGuard
from attnkit.serve.model_host import ModelHost
from attnkit.serve.model_roles import CLASSIFIER_FORM, PAGE_FORMS
from attnkit.serve.routes import include_routers
from attnkit.serve.routes.base import ServerParts, run_batches
from attnkit.serve.schemas import ErrorResponse
from attnkit.serve.settings import ServeSettings

__all__ = ["CLASSIFIER_FORM", "PAGE_FORMS", "ServeSettings", "create_app", "shutdown_hook"]


def shutdown_hook(app: RequestGuard) -> Callable[[], None]:
    """What the server calls when shutdown begins: cancel every queued and running request."""
    batcher: DynamicBatcher = app.app.state.batcher  # type: ignore[attr-defined]
    return batcher.close


def create_app(engine: ModelHost, settings: ServeSettings | None = None) -> RequestGuard:
    """The ASGI app serving ``engine``'s model; the batcher runs while the app does."""
    settings = settings or ServeSettings()
    threads = settings.threads

    def init_worker() -> None:
        import torch

        if threads:
            torch.set_num_threads(threads)

    # Generation joins and leaves one running batch per token where the model allows it.
    generator = (
        ContinuousGenerator(engine, max_rows=settings.max_generation_rows)
        if supports(engine)
        else None
    )
    batcher = DynamicBatcher(
        run_batches(engine),
        continuous={GENERATE: generator} if generator is not None else None,
        max_tokens=settings.max_batch_tokens,
        max_wait_ms=settings.max_wait_ms,
        max_sentences=settings.max_batch_sentences,
        init=init_worker,
        workers=settings.batch_workers,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        try:
            yield
        finally:
            batcher.stop()

    app = FastAPI(
        title="attnkit",
        summary=f"{engine.loaded.family.name} checkpoint {engine.loaded.directory.name}",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc load from a CDN: /docs is served instead
        redoc_url=None,
        responses={422: {"model": ErrorResponse}, 400: {"model": ErrorResponse}},
    )
    app.state.engine = engine
    app.state.batcher = batcher
    app.state.settings = settings
    parts = ServerParts(engine, batcher, settings, generator, started_at=time.time())
    endpoints = include_routers(app, parts)
    install_error_handlers(app, lambda: endpoints)
    return RequestGuard(app, max_bytes=settings.max_body_bytes, read_timeout=settings.read_timeout)
