"""The routes every server has, whatever its model: the explorer page, ``/docs``,
``/v1/health``, ``/v1/model``, ``/v1/explore`` and OpenAI's ``/v1/models``.

The page at ``/`` posts to the engine's ``page_url`` with its ``page_form``;
``/v1/explore`` asks the engine to check the text before queueing
(``explore_tokens``) and to explore it (``ModelHost.explore``) in the worker.
"""

from __future__ import annotations

import time
from dataclasses import asdict

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from attnkit.serve.deps import Handle
from attnkit.serve.docs_page import CSP as DOCS_CSP
from attnkit.serve.docs_page import render_docs
from attnkit.serve.model_host import ExploreAnswer, RequestError
from attnkit.serve.openai_api import model_name
from attnkit.serve.routes.base import ServedRouter, ServerParts, token_budget
from attnkit.serve.schemas import ExploreRequest, ExploreResponse

__all__ = ["ROUTER"]


def _build(parts: ServerParts) -> APIRouter:
    engine, batcher, settings = parts.engine, parts.batcher, parts.settings
    router = APIRouter()
    page: dict[str, str] = {}  # the rendered pages, made on first request
    model_id = model_name(engine.loaded.directory)
    created = int(time.time())

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def explorer() -> HTMLResponse:
        if "html" not in page:
            from attnkit.visualize.explorer import render_page

            page["html"] = render_page(
                None, api_url=engine.page_url, title=engine.loaded.family.name,
                form=engine.page_form,
            )  # fmt: skip
        return HTMLResponse(page["html"])

    @router.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        """The API described from /openapi.json, on the server: no script, no CDN."""
        if "docs" not in page:
            page["docs"] = render_docs(request.app.openapi())
        return HTMLResponse(page["docs"], headers={"content-security-policy": DOCS_CSP})

    @router.get("/v1/health")
    async def health() -> dict[str, object]:
        """Liveness: answers at once, even while the model is busy."""
        return {
            "status": "ok",
            "kind": engine.kind,
            "uptime_s": round(time.time() - parts.started_at, 1),
            "queued": batcher.pending(),
            "batcher": asdict(batcher.stats),
        }

    @router.get("/v1/model")
    async def model_info() -> dict[str, object]:
        """Family, config, vocabulary size, parameter count, limits and batching knobs."""
        from attnkit.serve import schemas

        return {
            **engine.describe(),
            "default_alpha": settings.alpha,  # of a /v1/translate request that names none
            "limits": {
                "max_sentences": schemas.MAX_SENTENCES,
                "max_chars": schemas.MAX_CHARS,
                "max_beam": schemas.MAX_BEAM,
                "max_new_tokens": settings.max_new_tokens,
                "max_body_bytes": settings.max_body_bytes,
                "read_timeout_s": settings.read_timeout,
                "request_timeout_s": settings.request_timeout,
                "max_connections": settings.max_connections,
            },
            "batching": {
                "max_batch_tokens": settings.max_batch_tokens,
                "max_wait_ms": settings.max_wait_ms,
                "max_batch_sentences": settings.max_batch_sentences,
                # generation (/v1/generate and OpenAI's): one running batch joined per token
                "continuous_generation": parts.generator is not None,
                "max_generation_rows": settings.max_generation_rows,
            },
        }

    @router.post("/v1/explore", response_model=ExploreResponse)
    async def explore(req: ExploreRequest, handle: Handle) -> ExploreAnswer:
        """The explorer page's request, for every family (what the page at / posts for LMs)."""
        text = req.text[0]
        new_tokens = engine.explore_tokens(text, req.max_new_tokens)  # a 422 before queueing
        if new_tokens is not None:
            token_budget(settings, new_tokens, handle, "max_new_tokens")
        result, _ = await batcher.call(
            lambda: engine.explore(text, beam=req.beam, nbest=req.nbest,
                                   max_new_tokens=req.max_new_tokens, handle=handle),
            handle=handle,
        )  # fmt: skip
        return result

    def model_card() -> dict[str, object]:
        return {"id": model_id, "object": "model", "created": created, "owned_by": "attnkit"}

    @router.get("/v1/models")
    async def models() -> dict[str, object]:
        """The one model this server holds (named after its checkpoint directory)."""
        return {"object": "list", "data": [model_card()]}

    @router.get("/v1/models/{model}")
    async def model(model: str) -> dict[str, object]:
        """The model, if ``model`` is its name."""
        if model != model_id:
            raise RequestError(f"model: no model {model!r}; this server holds {model_id!r}",
                               status=404, param="model", code="model_not_found")  # fmt: skip
        return model_card()

    return router


ROUTER = ServedRouter("common", _build, offered=lambda engine: True)
