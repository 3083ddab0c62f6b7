"""The JSON body of an error, by endpoint: attnkit's one line or OpenAI's error object.

attnkit's own endpoints answer ``{"error": "field: what is wrong"}``. The
OpenAI-compatible endpoints (``/v1/chat/completions``, ``/v1/completions``,
``/v1/models``, ``/v1/embeddings``) answer what OpenAI's API answers and its clients parse::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
               "code": null}}

with 400 where attnkit says 422 (OpenAI's status for a request it refuses).
Every place that answers an error (the app's exception handlers, the guards in
front of the app) builds its body here, so both shapes hold for every error.
"""

from __future__ import annotations

__all__ = ["OPENAI_PATHS", "JSONObject", "error_body", "error_status", "is_openai"]

JSONObject = dict[str, object]  # a JSON object the server answers (its values: JSON values)

OPENAI_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/embeddings")


def is_openai(path: str) -> bool:
    """Whether ``path`` is one of the OpenAI-compatible endpoints."""
    return path in OPENAI_PATHS or path.startswith("/v1/models/")


def error_status(path: str, status: int) -> int:
    """The status to answer: OpenAI refuses a request with 400, attnkit with 422."""
    return 400 if status == 422 and is_openai(path) else status


def _param(message: str) -> str | None:
    """The field a one-line message names (``max_tokens: ...`` -> ``max_tokens``)."""
    head, sep, _ = message.partition(": ")
    if sep and head and " " not in head and head not in ("body",):
        return head
    return None


def error_body(
    path: str, message: str, status: int, *, param: str | None = None, code: str | None = None
) -> JSONObject:
    """The body answering ``message`` with ``status`` on ``path``."""
    if not is_openai(path):
        return {"error": message}
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {
        "error": {
            "message": message,
            "type": kind,
            "param": param if param is not None else _param(message),
            "code": code,
        }
    }
