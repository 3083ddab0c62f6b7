"""An optional API key in front of the app: ``Authorization: Bearer KEY``, as OpenAI's API.

With ``--api-key`` (or ``ATTNKIT_API_KEY``, which ``ps`` does not show) every
route needs the key, except liveness (``GET /v1/health``) and the API's
description (``GET /docs``, ``/openapi.json``), which hold nothing secret. A
request without it, or with another key, is answered 401 in the endpoint's error
shape (OpenAI's object with ``code: "invalid_api_key"`` on the OpenAI routes),
with ``WWW-Authenticate: Bearer``, before its body is read. The key is compared
as SHA-256 digests with ``hmac.compare_digest``: the time taken says nothing about
how much of a guess was right, nor about the key's length.
"""

from __future__ import annotations

import hashlib
import hmac

from attnkit.serve.error_shape import error_body
from attnkit.serve.limits import ASGIApp, Message, Receive, Scope, Send, send_json

__all__ = ["API_KEY_ENV", "OPEN_PATHS", "ApiKeyCheck"]

API_KEY_ENV = "ATTNKIT_API_KEY"
OPEN_PATHS = frozenset({"/v1/health", "/docs", "/openapi.json"})  # GET (and HEAD) only


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


class ApiKeyCheck:
    """Answer only requests that carry ``key`` as a bearer token (module doc)."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        if not key:
            raise ValueError("key: empty")
        self.app = app
        self._digest = _digest(key.encode("utf-8"))

    def authorized(self, header: bytes | None) -> bool:
        """Whether an ``Authorization`` header value carries the key."""
        if header is None:
            return False
        scheme, _, token = header.strip().partition(b" ")
        given = _digest(token.strip()) if scheme.lower() == b"bearer" else b""
        return hmac.compare_digest(given, self._digest)  # b"": a digest never equals it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (
            scope.get("path") in OPEN_PATHS and scope.get("method") in ("GET", "HEAD")
        ):
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        if self.authorized(header):
            await self.app(scope, receive, send)
            return
        message = (
            "missing API key: send Authorization: Bearer KEY (this server runs with --api-key)"
            if header is None
            else "incorrect API key in the Authorization header (expected Bearer KEY)"
        )

        async def challenge(event: Message) -> None:
            if event["type"] == "http.response.start":
                event = {**event, "headers": [*event["headers"], (b"www-authenticate", b"Bearer")]}
            await send(event)

        body = error_body(scope.get("path", ""), message, 401, code="invalid_api_key")
        await send_json(challenge, 401, body, close=True)
