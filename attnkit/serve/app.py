"""The HTTP API on FastAPI: routes, request handles, the explorer page.

``create_app(engine, settings)`` returns the ASGI app (wrapped in ``RequestGuard``).
Every error a client can cause is ``{"error": "..."}`` on one line, naming the
field (or, for an endpoint that does not fit the loaded model, the endpoint
that does): ``attnkit.serve.errors``. Endpoints: see ``docs/serving.md`` or ``/docs``.

Each model request gets a ``RequestHandle`` (``attnkit.serve.deps``) with the
server's time budget; a task watching the connection cancels it when the
client disconnects, and the batcher and the decoding steps obey it. The
encoder-only routes are in ``attnkit.serve.encoder_routes``, the OpenAI-compatible
ones in ``attnkit.serve.openai_api``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import Any, cast

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse

from attnkit.serve.answer_batch import ANSWER, answer, is_reader
from attnkit.serve.batcher import DynamicBatcher
from attnkit.serve.continuous import GENERATE, ContinuousGenerator, GenerationJob, supports
from attnkit.serve.deps import Handle, timing
from attnkit.serve.docs_page import CSP as DOCS_CSP
from attnkit.serve.docs_page import render_docs
from attnkit.serve.encoder_batch import ENCODER_KEYS, is_classifier, run_encoder_batch
from attnkit.serve.encoder_routes import add_encoder_routes
from attnkit.serve.errors import install_error_handlers
from attnkit.serve.handles import RequestHandle
from attnkit.serve.limits import RequestGuard
from attnkit.serve.model_host import KIND_ENDPOINTS, ModelHost, RequestError
from attnkit.serve.openai_api import OPENAI_ENDPOINTS, add_openai_routes
from attnkit.serve.schemas import (
    ErrorResponse,
    ExploreRequest,
    ExploreResponse,
    GenerateRequest,
    GenerateResponse,
    TranslateRequest,
    TranslateResponse,
)
from attnkit.serve.settings import ServeSettings
from attnkit.visualize.explorer.page import ServedForm

__all__ = ["CLASSIFIER_FORM", "PAGE_FORMS", "ServeSettings", "create_app", "shutdown_hook"]

# The explorer page's text box, by the kind of model served: its button says what it does.
PAGE_FORMS: dict[str, ServedForm] = {
    "seq2seq": ServedForm("Translate", "Text to translate (Ctrl+Enter)", "translating\u2026"),
    "causal_lm": ServedForm(
        "Generate", "Prompt to continue (Ctrl+Enter)", "generating\u2026", search=False
    ),
    "masked_lm": ServedForm(
        "Fill masks", "Text with [MASK] markers (Ctrl+Enter)", "filling\u2026", search=False
    ),
}
# A text classifier's page (an encoder-only checkpoint with a classification head). The
# page renders attention payloads only, so its button runs /v1/explore on the text and
# the note says where the labels are.
CLASSIFIER_FORM = ServedForm(
    "Classify",
    "Text to classify (Ctrl+Enter)",
    "reading\u2026",
    search=False,
    note="this page shows the classifier's attention over the text, not its label: "
    "POST the text to /v1/classify for the predicted label and probabilities",
)


def shutdown_hook(app: RequestGuard) -> Callable[[], None]:
    """What the server calls when shutdown begins: cancel every queued and running request."""
    batcher: DynamicBatcher = app.app.state.batcher  # type: ignore[attr-defined]
    return batcher.close


def create_app(engine: ModelHost, settings: ServeSettings | None = None) -> RequestGuard:
    """The ASGI app serving ``engine``'s model; the batcher runs while the app does."""
    settings = settings or ServeSettings()

    def run_batch(key: Hashable, payloads: list[Any], handles: list[RequestHandle]) -> list[Any]:
        if key in ENCODER_KEYS:
            return run_encoder_batch(engine, key, payloads, handles)
        if key == ANSWER:
            return answer(engine, payloads, handles)
        beam, alpha, nbest = cast(tuple[int, float, int], key)
        flat = [src for sources in payloads for src in sources]
        owners = [h for sources, h in zip(payloads, handles) for _ in sources]
        results = engine.translate_requests(flat, beam=beam, alpha=alpha, nbest=nbest,
                                            handles=owners)  # fmt: skip
        out, start = [], 0
        for sources in payloads:
            out.append(results[start : start + len(sources)])
            start += len(sources)
        return out

    def init_worker() -> None:
        import torch

        if settings.threads:
            torch.set_num_threads(settings.threads)

    # Generation joins and leaves one running batch per token where the model allows it.
    generator = (
        ContinuousGenerator(engine, max_rows=settings.max_generation_rows)
        if supports(engine)
        else None
    )
    batcher = DynamicBatcher(
        run_batch,
        continuous={GENERATE: generator} if generator is not None else None,
        max_tokens=settings.max_batch_tokens,
        max_wait_ms=settings.max_wait_ms,
        max_sentences=settings.max_batch_sentences,
        init=init_worker,
        workers=settings.batch_workers,
    )
    started_at = time.time()
    page_url = "/v1/translate" if engine.kind == "seq2seq" else "/v1/explore"
    form = CLASSIFIER_FORM if is_classifier(engine) else PAGE_FORMS[engine.kind]
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
        docs_url=None,  # Swagger UI and ReDoc load from a CDN: /docs is served below instead
        redoc_url=None,
        responses={422: {"model": ErrorResponse}, 400: {"model": ErrorResponse}},
    )
    app.state.engine = engine
    app.state.batcher = batcher
    app.state.settings = settings

    def needs(kind: str, endpoint: str) -> Any:
        def check() -> None:
            engine.require(kind, endpoint)

        return Depends(check)

    def token_budget(requested: int, handle: RequestHandle, field: str) -> int:
        """``requested`` new tokens, if within the server's budget (else a 422 naming it)."""
        if requested > settings.max_new_tokens:
            raise RequestError(
                f"{field}: {requested} is over this server's limit of "
                f"{settings.max_new_tokens} (--max-new-tokens)"
            )
        handle.max_new_tokens = requested
        return requested

    install_error_handlers(app, lambda: _ENDPOINTS)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def explorer() -> HTMLResponse:
        if "html" not in page:
            from attnkit.visualize.explorer import render_page

            page["html"] = render_page(
                None, api_url=page_url, title=engine.loaded.family.name, form=form
            )
        return HTMLResponse(page["html"])

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs() -> HTMLResponse:
        """The API described from /openapi.json, on the server: no script, no CDN."""
        if "docs" not in page:
            page["docs"] = render_docs(app.openapi())
        return HTMLResponse(page["docs"], headers={"content-security-policy": DOCS_CSP})

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
                "continuous_generation": generator is not None,
                "max_generation_rows": settings.max_generation_rows,
            },
        }

    @app.post(
        "/v1/translate",
        response_model=TranslateResponse,
        response_model_exclude_none=True,
        dependencies=[needs("seq2seq", "/v1/translate")],
    )
    async def translate(req: TranslateRequest, handle: Handle) -> dict[str, Any]:
        """Translate every text (one dynamic batch with other compatible requests)."""
        started = time.monotonic()
        sources = engine.encode_sources(req.text)
        beam, nbest = req.beam, min(req.nbest, req.beam)
        alpha = req.alpha if "alpha" in req.model_fields_set else settings.alpha
        engine.check_search(beam=beam, alpha=alpha, nbest=nbest)  # serve --engine: a 422
        cost = sum(len(s) for s in sources) * beam
        results, info = await batcher.submit(
            (beam, alpha, nbest), sources, cost=cost, sentences=len(sources), handle=handle
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
                lambda: engine.translation_payload(src, first), handle=handle
            )
        answer["timing"] = timing(info, started)
        return answer

    @app.post(
        "/v1/generate",
        response_model=GenerateResponse,
        response_model_exclude_none=True,
        dependencies=[needs("causal_lm", "/v1/generate")],
    )
    async def generate(req: GenerateRequest, handle: Handle) -> dict[str, Any]:
        """Continue a prompt (seeded sampling; temperature 0 is greedy)."""
        from attnkit.serve.model_host import EXPLORE_NOTES

        started = time.monotonic()
        token_budget(req.max_new_tokens, handle, "max_new_tokens")
        prompt = engine.encode_prompt(req.prompt)
        top_k = min(req.top_k, engine.vocab_rows)
        job = GenerationJob(prompt, 1, req.max_new_tokens, req.temperature, req.top_p, req.seed,
                            top_k=top_k, until_eos=False)  # fmt: skip
        if generator is not None and generator.fits_alone(job):  # joins the running batch
            completion, info = await batcher.submit(GENERATE, job, cost=1, handle=handle)
            new: list[int] = completion.choices[0].ids
        else:  # alone: a model with absolute positions, or past the context (sliding window)
            options = req.model_dump(exclude={"prompt", "explore"})
            new, info = await batcher.call(
                lambda: engine.generate(prompt, **options, handle=handle), handle=handle
            )
        payload = None
        if req.explore:
            explored = await batcher.call(lambda: engine.causal_payload(prompt, new), handle=handle)
            payload = explored[0]
        decode = engine.tokenizer.decode
        full, head = decode([*prompt, *new]), decode(prompt)
        answer = {
            # decoding prompt + new keeps BPE word boundaries that decode(new) would lose
            "text": full[len(head) :] if full.startswith(head) else decode(new),
            "full_text": full,
            "new_tokens": len(new),
            "timing": timing(info, started),
        }
        if payload is not None:
            answer["explore"], answer["explore_note"] = payload, EXPLORE_NOTES["causal_lm"]
        return answer

    @app.post("/v1/explore", response_model=ExploreResponse)
    async def explore(req: ExploreRequest, handle: Handle) -> dict[str, Any]:
        """The explorer page's request, for every family (what the page at / posts for LMs)."""
        text = req.text[0]
        if engine.kind == "seq2seq":
            engine.encode_sources([text])  # a 422 before queueing
        elif engine.kind == "causal_lm":
            token_budget(req.max_new_tokens, handle, "max_new_tokens")
        result, _ = await batcher.call(
            lambda: engine.explore(
                text,
                beam=req.beam,
                nbest=req.nbest,
                max_new_tokens=req.max_new_tokens,
                handle=handle,
            ),
            handle=handle,
        )
        answer: dict[str, Any] = result
        return answer

    add_encoder_routes(app, engine, batcher, needs=needs)
    add_openai_routes(
        app, engine, batcher, settings, generator, needs=lambda e: needs("causal_lm", e)
    )

    _ENDPOINTS = sorted(
        {"GET /", "GET /v1/health", "GET /v1/model", "POST /v1/explore", "GET /docs"}
        | {f"POST {KIND_ENDPOINTS[engine.kind]}"}
        | ({"POST /v1/classify"} if is_classifier(engine) else set())
        | ({"POST /v1/embeddings"} if engine.kind == "masked_lm" else set())
        | ({"POST /v1/answer"} if is_reader(engine) else set())
        | (set(OPENAI_ENDPOINTS) if engine.kind == "causal_lm" else {"GET /v1/models"})
    )
    return RequestGuard(app, max_bytes=settings.max_body_bytes, read_timeout=settings.read_timeout)
