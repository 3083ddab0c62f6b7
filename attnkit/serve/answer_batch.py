"""Extractive question answering in dynamic batches: ``POST /v1/answer``.

Concurrent requests are grouped by the batcher (``routes.encoder.AnswerBatch``: the
token budget counts each request's question and context characters) and run
as one pass over all their windows (``attnkit.evaluation.question_answering``):
a window is padded like any other row, which the encoder masks out, so each
request gets the answer it gets alone. The windows are ``attnkit answer``'s
defaults (``qa_windows.default_windows``). Requests cancelled before the pass are left out of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import torch
from pydantic import BaseModel, Field, model_validator

from attnkit.data.qa_windows import default_windows
from attnkit.data.squad import QAExample
from attnkit.serve.cancellable import live_requests
from attnkit.serve.handles import RequestHandle
from attnkit.serve.model_host import ModelHost
from attnkit.serve.schemas import _STRICT, MAX_CHARS, Text, Timing

__all__ = ["AnswerRequest", "AnswerResponse", "AnswerSpan", "answer", "is_reader"]

MAX_CONTEXT_CHARS = 20 * MAX_CHARS  # a context is longer than a sentence: ~40 KB


class AnswerRequest(BaseModel):
    """``POST /v1/answer``: the span of ``context`` that answers ``question``."""

    model_config = _STRICT

    question: Text = Field(description="the question")
    context: str = Field(min_length=1, max_length=MAX_CONTEXT_CHARS,
                         description="the text that holds the answer")  # fmt: skip
    max_answer_len: int = Field(30, ge=1, le=512, description="longest answer, in tokens")

    @model_validator(mode="after")
    def _not_blank(self) -> AnswerRequest:
        for name in ("question", "context"):
            if not getattr(self, name).strip():
                raise ValueError(f"{name}: empty text")
        return self


class AnswerResponse(BaseModel):
    answer: str = Field(description="the span of the context (context[start:end])")
    score: float = Field(description="the span's start probability times its end probability")
    start: int
    end: int
    timing: Timing


class AnswerSpan(TypedDict):
    """One request's answer (``AnswerResponse`` without its timing)."""

    answer: str
    score: float
    start: int
    end: int


def is_reader(engine: ModelHost) -> bool:
    """Whether ``engine`` holds an extractive QA checkpoint (a start/end token head)."""
    from attnkit.evaluation.question_answering import is_qa_config

    return engine.is_encoder and is_qa_config(engine.model.config)


@torch.no_grad()
def answer(
    engine: ModelHost,
    jobs: Sequence[AnswerRequest],
    handles: Sequence[RequestHandle] | None = None,
) -> list[AnswerSpan | None]:
    """Each live request's best span, all windows of all requests in one batched pass."""
    from attnkit.data.qa_windows import make_windows
    from attnkit.evaluation.question_answering import decode_answers, window_logits

    live = live_requests(handles, len(jobs))
    results: list[AnswerSpan | None] = [None] * len(jobs)
    if not live:
        return results
    window, stride = default_windows(engine.max_len)
    examples = [QAExample(str(i), jobs[i].question, jobs[i].context, (), (), "request")
                for i in live]  # fmt: skip
    windows = make_windows(engine.tokenizer, examples, max_len=window, stride=stride)
    logits = window_logits(engine.model, windows, engine.tokenizer, batch_size=64)
    limits = [jobs[i].max_answer_len for i in live]
    found = decode_answers(windows, logits, examples, max_answer_len=limits)
    for k, i in enumerate(live):
        best = found[k][0]
        results[i] = {"answer": best.text, "score": best.probability, "start": best.start,
                      "end": best.end}  # fmt: skip
    return results
