"""Summaries in dynamic batches: ``POST /v1/summarize`` on a summarization checkpoint.

A checkpoint summarizes when its run was trained with ``task: summarization``
(``ModelHost.summarizes``); it is an encoder-decoder or a decoder-only LM, and
each writes what ``attnkit summarize`` writes (``attnkit.decoding.summaries``):

* an encoder-decoder reads each text cut to its positions (the beginning
  kept, as the CLI cuts it) and writes the summary by greedy or beam search,
  at most ``max_tokens`` tokens. The texts of every request with the same
  ``(beam, alpha, max_tokens)`` are decoded as one length-sorted batch through
  the engine's stepper (``routes.summarization.SummaryBatch``), each request's
  rows stopping at the next step once it is cancelled;
* a decoder-only LM continues the instruction prompt greedily until its
  end-of-sequence token (``summarize_texts``: a request's texts batched
  where the model allows it, through the engine's prepared stepper), the
  batch's requests in turn; a cancelled request's texts are skipped.

The texts are tokenized in the event loop (the batch's token budget counts
them); a request that is not a list of 1 to ``MAX_DOCUMENTS`` non-blank texts of
at most ``MAX_DOCUMENT_CHARS`` characters (or one such text) is a 422 naming the
field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import torch
from pydantic import BaseModel, Field, field_validator

from attnkit.serve.cancellable import CancellableStepper, Owners, live_requests
from attnkit.serve.handles import RequestHandle
from attnkit.serve.model_host import ModelHost, RequestError
from attnkit.serve.schemas import _STRICT, MAX_BEAM, MAX_CHARS, MAX_NEW_TOKENS, Timing

__all__ = [
    "MAX_DOCUMENTS",
    "MAX_DOCUMENT_CHARS",
    "SummarizeRequest",
    "SummarizeResponse",
    "SummaryJob",
    "encode_documents",
    "summarize",
]

MAX_DOCUMENTS = 32  # texts in one request (attnkit summarize's default batch)
MAX_DOCUMENT_CHARS = 20 * MAX_CHARS  # a document is longer than a sentence: ~40 KB
DEFAULT_BEAM = 4  # an encoder-decoder's, as attnkit summarize's (a decoder-only LM: 1)

Document = Annotated[str, Field(min_length=1, max_length=MAX_DOCUMENT_CHARS)]


class SummarizeRequest(BaseModel):
    """``POST /v1/summarize``: a summary of each text."""

    model_config = _STRICT

    text: list[Document] = Field(
        min_length=1, max_length=MAX_DOCUMENTS,
        description=f"the texts to summarize (at most {MAX_DOCUMENTS}), or one text; each is "
        "cut to what the model reads, its beginning kept",
    )  # fmt: skip
    max_tokens: int = Field(32, ge=1, le=MAX_NEW_TOKENS, description="longest summary, in tokens")
    beam: int | None = Field(
        None, ge=1, le=MAX_BEAM,
        description=f"beam size (1: greedy; default {DEFAULT_BEAM}; a decoder-only model: 1 only)",
    )  # fmt: skip
    alpha: float = Field(0.6, ge=0.0, le=10.0, allow_inf_nan=False,
                         description="GNMT length penalty alpha")  # fmt: skip

    @field_validator("text", mode="before")
    @classmethod
    def _one_text(cls, text: object) -> object:
        return [text] if isinstance(text, str) else text  # one text: a list of one

    @field_validator("text")
    @classmethod
    def _not_blank(cls, texts: list[str]) -> list[str]:
        for i, t in enumerate(texts):
            if not t.strip():
                raise ValueError(f"text[{i}]: holds only whitespace")
        return texts


class SummarizeResponse(BaseModel):
    summaries: list[str] = Field(description="one per text, in order")
    timing: Timing


@dataclass(frozen=True)
class SummaryJob:
    """One request: its texts, and (an encoder-decoder's) their source ids, EOS last."""

    texts: list[str]
    sources: list[list[int]]
    tokens: int  # what the batch's token budget counts


def encode_documents(engine: ModelHost, texts: Sequence[str], beam: int | None) -> SummaryJob:
    """The request's job, and its beam (a decoder-only model's is 1: another is a 422)."""
    from attnkit.decoding.text import source_ids

    if engine.generates:
        if beam not in (None, 1):
            raise RequestError(f"beam: {beam}; a decoder-only model summarizes greedily: use 1")
        return SummaryJob(list(texts), [], sum(len(t) for t in texts) // 4 + 1)  # ~tokens
    limit = engine.max_len - 1  # as attnkit summarize cuts a text (BOS takes a position)
    sources = [source_ids(engine.tokenizer, t, limit) for t in texts]
    return SummaryJob(list(texts), sources, sum(len(s) for s in sources))


@torch.no_grad()
def summarize(
    engine: ModelHost,
    jobs: Sequence[SummaryJob],
    handles: Sequence[RequestHandle],
    *,
    beam: int,
    alpha: float,
    max_tokens: int,
) -> list[list[str] | None]:
    """Each live request's summaries, in order (module doc); ``None`` for a cancelled one."""
    live = live_requests(handles, len(jobs))
    results: list[list[str] | None] = [None] * len(jobs)
    if not live:
        return results
    if engine.generates:
        from attnkit.decoding.summaries import summarize_texts

        for i in live:  # one text at a time, as attnkit summarize (prompts differ in length)
            if handles[i].cancelled:  # since the batch began: its texts are skipped
                continue
            results[i] = summarize_texts(engine.model, engine.tokenizer, jobs[i].texts, beam=1,
                                         max_tokens=max_tokens, device=engine.device,
                                         stepper=engine.stepper)  # fmt: skip
        return results
    from attnkit.decoding.text import decode_ids

    assert engine.stepper is not None  # an encoder-decoder's engine has one
    flat = [src for i in live for src in jobs[i].sources]
    owners = [handles[i] for i in live for _ in jobs[i].sources]
    decoded = decode_ids(
        CancellableStepper(engine.stepper, Owners(flat, owners)), flat, beam=beam, alpha=alpha,
        batch_size=max(1, len(flat)), max_len=min(max_tokens, engine.max_len - 1),
        device=engine.device, search=engine.plan.search,
    )  # fmt: skip
    n = 0
    for i in live:
        k = len(jobs[i].sources)
        results[i] = [engine.tokenizer.decode(r.tokens[0]).strip() for r in decoded[n : n + k]]
        n += k
    return results
