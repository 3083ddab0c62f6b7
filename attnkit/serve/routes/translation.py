"""``POST /v1/translate``: the router of encoder-decoder checkpoints.

Each request's sources are queued as one item of a ``TranslationBatch``: the
requests with the same ``(beam, alpha, nbest)`` are decoded as one
length-sorted batch (by the model's stepper, or by ``serve --engine``'s
translator), each sentence stopping at the next step if its request is cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import APIRouter

from attnkit.decoding.common import DecodeResult
from attnkit.serve.deps import Handle, timing
from attnkit.serve.handles import RequestHandle
from attnkit.serve.model_host import ModelHost, RequestError
from attnkit.serve.model_roles import TranslationRole
from attnkit.serve.routes.base import ServedRouter, ServerParts, submit
from attnkit.serve.schemas import TranslateRequest, TranslateResponse

__all__ = ["ROUTER", "TranslationBatch"]

Sources = list[list[int]]  # one request's source ids, EOS last


@dataclass(frozen=True)
class TranslationBatch:
    """The batch kind of /v1/translate: requests with these search settings decode together."""

    beam: int
    alpha: float
    nbest: int

    def run(
        self,
        engine: ModelHost,
        payloads: Sequence[Sources],
        handles: Sequence[RequestHandle],
    ) -> list[list[DecodeResult]]:
        """Every sentence of every request in one call; each request's results, in order."""
        flat = [src for sources in payloads for src in sources]
        owners = [h for sources, h in zip(payloads, handles) for _ in sources]
        results = engine.translate_requests(flat, beam=self.beam, alpha=self.alpha,
                                            nbest=self.nbest, handles=owners)  # fmt: skip
        out, start = [], 0
        for sources in payloads:
            out.append(results[start : start + len(sources)])
            start += len(sources)
        return out


def _build(parts: ServerParts) -> APIRouter:
    engine, batcher, settings = parts.engine, parts.batcher, parts.settings
    router = APIRouter()

    @router.post("/v1/translate", response_model=TranslateResponse,
                 response_model_exclude_none=True)  # fmt: skip
    async def translate(req: TranslateRequest, handle: Handle) -> dict[str, object]:
        """Translate every text (one dynamic batch with other compatible requests)."""
        started = time.monotonic()
        sources = engine.encode_sources(req.text)
        beam, nbest = req.beam, min(req.nbest, req.beam)
        alpha = req.alpha if "alpha" in req.model_fields_set else settings.alpha
        engine.check_search(beam=beam, alpha=alpha, nbest=nbest)  # serve --engine: a 422
        cost = sum(len(s) for s in sources) * beam
        results, info = await submit(
            batcher, TranslationBatch(beam, alpha, nbest), sources,
            cost=cost, sentences=len(sources), handle=handle,
        )  # fmt: skip
        rows = [engine.result_json(r, nbest) for r in results]
        answer: dict[str, object] = {
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

    return router


def _refusal(engine: ModelHost, endpoint: str) -> RequestError:
    return engine.wrong_model(TranslationRole.kind, endpoint)


ROUTER = ServedRouter(
    "translation", _build, offered=lambda engine: engine.translates, refusal=_refusal
)
