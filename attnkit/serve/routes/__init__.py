"""The server's routers, one per kind of checkpoint (``ServedRouter``).

``ROUTERS`` is the one list of them; ``create_app`` builds each, includes
the ones the engine offers as they are and the others behind their refusal
(a 400 naming the endpoint that fits), and lists the offered endpoints in its
404s (``offered_endpoints``).

* ``common``: ``/``, ``/docs``, ``/v1/health``, ``/v1/model``, ``/v1/explore``,
  ``/v1/models`` (every model);
* ``translation``: ``/v1/translate`` (encoder-decoders);
* ``language_model``: ``/v1/generate`` and OpenAI's completions (decoder-only LMs);
* ``encoder``: fill-mask, the task heads' endpoints, OpenAI's embeddings
  (encoder-only models);
* ``summarization``: ``/v1/summarize`` (checkpoints trained to summarize).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.routing import APIRoute

from attnkit.serve.model_host import ModelHost
from attnkit.serve.routes import common, encoder, language_model, summarization, translation
from attnkit.serve.routes.base import ServedRouter, ServerParts

__all__ = ["ROUTERS", "include_routers"]

ROUTERS: tuple[ServedRouter, ...] = (
    common.ROUTER,
    translation.ROUTER,
    language_model.ROUTER,
    encoder.ROUTER,
    summarization.ROUTER,
)


def _endpoints(router: APIRouter) -> list[str]:
    """``"POST /v1/translate"`` and the like, for every route of ``router``."""
    out = []
    for route in router.routes:
        if isinstance(route, APIRoute):
            methods = sorted((route.methods or set()) - {"HEAD"})
            out += [f"{method} {route.path}" for method in methods]
    return out


def include_routers(app: FastAPI, parts: ServerParts) -> list[str]:
    """Include every router of ``ROUTERS`` in ``app`` (module doc); the endpoints the
    engine offers, sorted, for the 404s."""
    engine = parts.engine
    offered: list[str] = []
    for spec in ROUTERS:
        router = spec.build(parts)
        if spec.offered(engine):
            app.include_router(router)
            offered += [e for e in _endpoints(router) if spec.lists(engine, e)]
        else:
            assert spec.refusal is not None, f"router {spec.name} is offered by every engine"
            app.include_router(router, dependencies=[Depends(_refuse(spec, engine))])
    return sorted(offered)


def _refuse(spec: ServedRouter, engine: ModelHost) -> Callable[[Request], None]:
    """The dependency that answers every route of ``spec`` with its refusal."""
    refusal = spec.refusal
    assert refusal is not None

    def refuse(request: Request) -> None:
        raise refusal(engine, request.url.path)

    return refuse
