"""One-line JSON errors: ``{"error": "..."}`` for everything a client can cause.

``install_error_handlers(app, endpoints)`` turns pydantic validation errors
into ``field: what is wrong`` (422; malformed JSON 400), FastAPI's own HTTP
errors (404 listing the endpoints, 405, a body that cannot be parsed) into the
same shape, cancelled requests (``RequestCancelled``) into their reason with
its status (499 client gone, 503 time budget or shutdown), and anything
unexpected into a 500 naming only the exception's type. Errors raised before
the app (malformed HTTP, overload, body limits) are answered in the same shape
by ``attnkit.serve.limits``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnkit.serve.batcher import BatcherClosed
from attnkit.serve.error_shape import error_body, error_status
from attnkit.serve.handles import RequestCancelled
from attnkit.serve.model_host import RequestError

__all__ = ["install_error_handlers", "validation_message"]


def _where(loc: Sequence[object]) -> str:
    """``("body", "text", 0)`` -> ``text[0]``."""
    parts = [p for p in loc if p != "body"]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def _error_message(e: Mapping[str, object]) -> str:
    """One pydantic error (``ErrorDetails``) as ``field: what is wrong``."""
    kind = e.get("type", "")
    loc = e.get("loc", ())
    where = _where(loc if isinstance(loc, tuple | list) else ())
    if kind == "json_invalid":
        ctx = e.get("ctx")
        why = ctx.get("error", "cannot parse") if isinstance(ctx, Mapping) else "cannot parse"
        return f"body: malformed JSON ({why})"
    if kind == "extra_forbidden":
        return f"{where}: unknown field"
    if kind == "missing":
        return f"{where}: field required"
    if kind in ("model_attributes_type", "model_type", "dict_type") and where == "body":
        return "body: expected a JSON object"
    msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
    return msg if where == "body" or msg.startswith(where) else f"{where}: {msg}"


def validation_message(exc: RequestValidationError) -> str:
    """The first two errors (unknown fields first: often a misspelt name), on one line."""
    errors = sorted(exc.errors(), key=lambda e: e.get("type") != "extra_forbidden")
    if not errors:
        return "body: invalid"
    message = "; ".join(_error_message(e) for e in errors[:2])
    return message + (f" (and {len(errors) - 2} more)" if len(errors) > 2 else "")


def _unparsable(cause: BaseException | None) -> str:
    """Why FastAPI could not parse a body it calls JSON (its own message says nothing)."""
    if isinstance(cause, UnicodeDecodeError):
        return f"body: malformed JSON (not UTF-8: byte {cause.start})"
    if isinstance(cause, RecursionError):
        return "body: malformed JSON (nested too deeply)"
    return f"body: malformed JSON ({type(cause).__name__})"


def _answer(
    request: Request, message: str, status: int, *, param: str | None = None,
    code: str | None = None,
) -> JSONResponse:  # fmt: skip
    """``message`` in the error shape of the request's endpoint (``attnkit.serve.error_shape``)."""
    path = request.url.path
    status = error_status(path, status)
    body = error_body(path, message, status, param=param, code=code)
    return JSONResponse(body, status_code=status)


def install_error_handlers(app: FastAPI, endpoints: Callable[[], Sequence[str]]) -> None:
    """Answer every error of ``app`` as ``{"error": "..."}`` (OpenAI's error object on the
    OpenAI-compatible endpoints); 404s list ``endpoints()``."""

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        return _answer(request, str(exc), exc.status, param=exc.param, code=exc.code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        malformed = any(e.get("type") == "json_invalid" for e in exc.errors())
        status = 400 if malformed else 422
        return _answer(request, validation_message(exc), status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"{request.url.path}: not found; endpoints: {', '.join(endpoints())}"
        elif exc.status_code == 405:
            message = f"{request.url.path}: method {request.method} not allowed"
        elif exc.status_code == 400 and exc.__cause__ is not None:
            message = _unparsable(exc.__cause__)
        return _answer(request, message, exc.status_code)

    @app.exception_handler(RequestCancelled)
    async def _cancelled(request: Request, exc: RequestCancelled) -> JSONResponse:
        return _answer(request, str(exc), exc.status)

    @app.exception_handler(BatcherClosed)
    async def _closed(request: Request, exc: BatcherClosed) -> JSONResponse:
        return _answer(request, str(exc), 503)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        return _answer(request, f"internal error: {type(exc).__name__}", 500)
