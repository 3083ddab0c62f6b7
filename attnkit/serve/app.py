"""The HTTP API on FastAPI: routes, one-line JSON errors, the explorer page.

``create_app(engine, settings)`` returns the ASGI app (wrapped in ``RequestGuard``).
Every error a client can cause is ``{"error": "..."}`` on one line, naming the
field (or, for an endpoint that does not fit the loaded model, the endpoint
that does). Endpoints: see ``docs/serving.md`` or ``/docs``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Hashable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any, cast

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnkit.serve.batcher import BatcherClosed, BatchInfo, DynamicBatcher
from attnkit.serve.engine import KIND_ENDPOINTS, Engine, RequestError
from attnkit.serve.limits import RequestGuard
from attnkit.serve.schemas import (
    ErrorResponse,
    ExploreRequest,
    ExploreResponse,
    FillMaskRequest,
    FillMaskResponse,
    GenerateRequest,
    GenerateResponse,
    TranslateRequest,
    TranslateResponse,
)


@dataclass
class ServeSettings:
    """The knobs of ``attnkit serve`` (see ``docs/serving.md``)."""

    max_batch_tokens: int = 512  # source tokens x beam per decode batch (the CLI's CPU default)
    max_wait_ms: float = 5.0
    max_batch_sentences: int = 128
    max_body_bytes: int = 256 * 1024
    read_timeout: float = 10.0  # seconds for a whole request body
    threads: int | None = None  # torch intra-op threads in the worker (None: torch's default)


def _timing(info: BatchInfo, started: float) -> dict[str, Any]:
    return {
        "queue_ms": round(info.queue_ms, 3),
        "compute_ms": round(info.compute_ms, 3),
        "total_ms": round((time.monotonic() - started) * 1000.0, 3),
        "batch_requests": info.batch_requests,
        "batch_sentences": info.batch_sentences,
    }


def _where(loc: Sequence[Any]) -> str:
    """``("body", "text", 0)`` -> ``text[0]``."""
    parts = [p for p in loc if p != "body"]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def _error_message(e: Any) -> str:
    """One pydantic error as ``field: what is wrong``."""
    kind, where = e.get("type", ""), _where(e.get("loc", ()))
    if kind == "json_invalid":
        return f"body: malformed JSON ({e.get('ctx', {}).get('error', 'cannot parse')})"
    if kind == "extra_forbidden":
        return f"{where}: unknown field"
    if kind == "missing":
        return f"{where}: field required"
    if kind in ("model_attributes_type", "model_type", "dict_type") and where == "body":
        return "body: expected a JSON object"
    msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
    return msg if where == "body" or msg.startswith(where) else f"{where}: {msg}"


def _validation_message(exc: RequestValidationError) -> str:
    """The first two errors (unknown fields first: often a misspelt name), on one line."""
    errors = sorted(exc.errors(), key=lambda e: e.get("type") != "extra_forbidden")
    if not errors:
        return "body: invalid"
    message = "; ".join(_error_message(e) for e in errors[:2])
    return message + (f" (and {len(errors) - 2} more)" if len(errors) > 2 else "")


def create_app(engine: Engine, settings: ServeSettings | None = None) -> Any:
    """The ASGI app serving ``engine``'s model; the batcher runs while the app does."""
    settings = settings or ServeSettings()

    def run_batch(key: Hashable, payloads: list[Any]) -> list[Any]:
        beam, alpha, nbest = cast(tuple[int, float, int], key)
        flat = [src for sources in payloads for src in sources]
        results = engine.translate(flat, beam=beam, alpha=alpha, nbest=nbest)
        out, start = [], 0
        for sources in payloads:
            out.append(results[start : start + len(sources)])
            start += len(sources)
        return out

    def init_worker() -> None:
        import torch

        if settings.threads:
            torch.set_num_threads(settings.threads)

    batcher = DynamicBatcher(
        run_batch,
        max_tokens=settings.max_batch_tokens,
        max_wait_ms=settings.max_wait_ms,
        max_sentences=settings.max_batch_sentences,
        init=init_worker,
    )
    started_at = time.time()
    page_url = "/v1/translate" if engine.kind == "seq2seq" else "/v1/explore"
    page: dict[str, str] = {}

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
        responses={422: {"model": ErrorResponse}, 400: {"model": ErrorResponse}},
    )
    app.state.engine = engine
    app.state.batcher = batcher

    def needs(kind: str, endpoint: str) -> Any:
        def check() -> None:
            engine.require(kind, endpoint)

        return Depends(check)

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        malformed = any(e.get("type") == "json_invalid" for e in exc.errors())
        status = 400 if malformed else 422
        return JSONResponse({"error": _validation_message(exc)}, status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"{request.url.path}: not found; endpoints: {', '.join(_ENDPOINTS)}"
        elif exc.status_code == 405:
            message = f"{request.url.path}: method {request.method} not allowed"
        return JSONResponse({"error": message}, status_code=exc.status_code)

    @app.exception_handler(BatcherClosed)
    async def _closed(request: Request, exc: BatcherClosed) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=503)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"internal error: {type(exc).__name__}"}, status_code=500)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def explorer() -> HTMLResponse:
        if "html" not in page:
            from attnkit.visualize.explorer import render_page

            page["html"] = render_page(None, api_url=page_url, title=engine.loaded.family.name)
        return HTMLResponse(page["html"])

    @app.get("/v1/health")
    async def health() -> dict[str, Any]:
        """Liveness: answers at once, even while the model is busy."""
        return {
            "status": "ok",
            "kind": engine.kind,
            "uptime_s": round(time.time() - started_at, 1),
            "queued": batcher.pending(),
            "batcher": asdict(batcher.stats),
        }

    @app.get("/v1/model")
    async def model_info() -> dict[str, Any]:
        """Family, config, vocabulary size, parameter count, limits and batching knobs."""
        from attnkit.serve import schemas

        return {
            **engine.describe(),
            "limits": {
                "max_sentences": schemas.MAX_SENTENCES,
                "max_chars": schemas.MAX_CHARS,
                "max_beam": schemas.MAX_BEAM,
                "max_new_tokens": schemas.MAX_NEW_TOKENS,
                "max_body_bytes": settings.max_body_bytes,
                "read_timeout_s": settings.read_timeout,
            },
            "batching": {
                "max_batch_tokens": settings.max_batch_tokens,
                "max_wait_ms": settings.max_wait_ms,
                "max_batch_sentences": settings.max_batch_sentences,
            },
        }

    @app.post(
        "/v1/translate",
        response_model=TranslateResponse,
        response_model_exclude_none=True,
        dependencies=[needs("seq2seq", "/v1/translate")],
    )
    async def translate(req: TranslateRequest) -> dict[str, Any]:
        """Translate every text (one dynamic batch with other compatible requests)."""
        started = time.monotonic()
        sources = engine.encode_sources(req.text)
        beam, nbest = req.beam, min(req.nbest, req.beam)
        cost = sum(len(s) for s in sources) * beam
        results, info = await batcher.submit(
            (beam, req.alpha, nbest), sources, cost=cost, sentences=len(sources)
        )
        rows = [engine.result_json(r, nbest) for r in results]
        answer: dict[str, Any] = {
            "translations": [r["translation"] for r in rows],
            "scores": [r["score"] for r in rows],
            "nbest": [r["nbest"] for r in rows],
        }
        if req.explore:
            src, first = sources[0], results[0]
            answer["explore"], _ = await batcher.call(
                lambda: engine.translation_payload(src, first)
            )
        answer["timing"] = _timing(info, started)
        return answer

    @app.post(
        "/v1/generate",
        response_model=GenerateResponse,
        response_model_exclude_none=True,
        dependencies=[needs("causal_lm", "/v1/generate")],
    )
    async def generate(req: GenerateRequest) -> dict[str, Any]:
        """Continue a prompt (seeded sampling; temperature 0 is greedy)."""
        from attnkit.serve.engine import EXPLORE_NOTES

        started = time.monotonic()
        prompt = engine.encode_prompt(req.prompt)
        options = req.model_dump(exclude={"prompt", "explore"})

        def job() -> tuple[list[int], dict[str, Any] | None]:
            new = engine.generate(prompt, **options)
            return new, engine.causal_payload(prompt, new) if req.explore else None

        (new, payload), info = await batcher.call(job)
        decode = engine.tokenizer.decode
        full, head = decode([*prompt, *new]), decode(prompt)
        answer = {
            # decoding prompt + new keeps BPE word boundaries that decode(new) would lose
            "text": full[len(head) :] if full.startswith(head) else decode(new),
            "full_text": full,
            "new_tokens": len(new),
            "timing": _timing(info, started),
        }
        if payload is not None:
            answer["explore"], answer["explore_note"] = payload, EXPLORE_NOTES["causal_lm"]
        return answer

    @app.post(
        "/v1/fill-mask",
        response_model=FillMaskResponse,
        response_model_exclude_none=True,
        dependencies=[needs("masked_lm", "/v1/fill-mask")],
    )
    async def fill_mask(req: FillMaskRequest) -> dict[str, Any]:
        """Predict every mask marker of the text from both sides."""
        from attnkit.serve.engine import EXPLORE_NOTES

        started = time.monotonic()
        masked = engine.encode_masked(req.text, req.mask_token)

        def job() -> tuple[str, list[dict[str, Any]], dict[str, Any] | None]:
            filled, masks = engine.fill_mask(masked, req.top_k)
            payload = engine.masked_payload(masked, filled) if req.explore else None
            return filled, masks, payload

        (filled, masks, payload), info = await batcher.call(job)
        answer: dict[str, Any] = {"filled": filled, "masks": masks}
        answer["timing"] = _timing(info, started)
        if payload is not None:
            answer["explore"], answer["explore_note"] = payload, EXPLORE_NOTES["masked_lm"]
        return answer

    @app.post("/v1/explore", response_model=ExploreResponse)
    async def explore(req: ExploreRequest) -> dict[str, Any]:
        """The explorer page's request, for every family (what the page at / posts for LMs)."""
        text = req.text[0]
        if engine.kind == "seq2seq":
            engine.encode_sources([text])  # a 422 before queueing
        result, _ = await batcher.call(
            lambda: engine.explore(
                text, beam=req.beam, nbest=req.nbest, max_new_tokens=req.max_new_tokens
            )
        )
        answer: dict[str, Any] = result
        return answer

    _ENDPOINTS = sorted(
        {"GET /", "GET /v1/health", "GET /v1/model", "POST /v1/explore", "GET /docs"}
        | {f"POST {KIND_ENDPOINTS[engine.kind]}"}
    )
    return RequestGuard(app, max_bytes=settings.max_body_bytes, read_timeout=settings.read_timeout)
