"""``POST /v1/summarize``: the router of summarization checkpoints (``task: summarization``).

Offered beside the checkpoint's own kind's router (an encoder-decoder still
translates, a decoder-only LM still generates); on any other checkpoint it
answers 400. The work is ``attnkit.serve.summarize_batch``'s; requests with
the same search settings share a ``SummaryBatch``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import APIRouter

from attnkit.serve.deps import Handle, timing
from attnkit.serve.handles import RequestHandle
from attnkit.serve.model_host import ModelHost, RequestError
from attnkit.serve.routes.base import ServedRouter, ServerParts, submit, token_budget
from attnkit.serve.summarize_batch import (
    DEFAULT_BEAM,
    SummarizeRequest,
    SummarizeResponse,
    SummaryJob,
    encode_documents,
    summarize,
)

__all__ = ["ROUTER", "SummaryBatch"]


@dataclass(frozen=True)
class SummaryBatch:
    """The batch kind of /v1/summarize: requests with these settings decode together."""

    beam: int
    alpha: float
    max_tokens: int

    def run(
        self, engine: ModelHost, payloads: Sequence[SummaryJob], handles: Sequence[RequestHandle]
    ) -> list[list[str] | None]:
        return summarize(engine, payloads, handles, beam=self.beam, alpha=self.alpha,
                         max_tokens=self.max_tokens)  # fmt: skip


def _build(parts: ServerParts) -> APIRouter:
    engine, batcher = parts.engine, parts.batcher
    router = APIRouter()

    @router.post("/v1/summarize", response_model=SummarizeResponse)
    async def summarize_texts(req: SummarizeRequest, handle: Handle) -> dict[str, object]:
        """A summary of each text (one dynamic batch with other compatible requests)."""
        started = time.monotonic()
        token_budget(parts.settings, req.max_tokens, handle, "max_tokens")
        job = encode_documents(engine, req.text, req.beam)
        beam = 1 if engine.generates else (req.beam or DEFAULT_BEAM)
        kind = SummaryBatch(beam, req.alpha, req.max_tokens)
        summaries, info = await submit(batcher, kind, job, cost=job.tokens * beam,
                                       sentences=len(job.texts), handle=handle)  # fmt: skip
        return {"summaries": summaries, "timing": timing(info, started)}

    return router


def _refusal(engine: ModelHost, endpoint: str) -> RequestError:
    return RequestError(
        f"{endpoint} needs a summarization checkpoint (trained with task: summarization), "
        f"but this checkpoint is not one: use POST {engine.role.endpoint}",
        status=400,
    )


ROUTER = ServedRouter(
    "summarization", _build, offered=lambda engine: engine.summarizes, refusal=_refusal
)
