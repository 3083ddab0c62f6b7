"""``POST /v1/tag``: named entities from a token-classification checkpoint, in dynamic batches.

A request holds sentences (``text``, each split into words at whitespace, as
``attnkit tag`` reads its lines); the answer has, per sentence, its words, their
tags (``scheme``: BIO by default) and the entity spans. Concurrent requests are
grouped by the batcher (``routes.encoder.TagBatch``) and run as one padded pass, as
``/v1/classify`` is (``attnkit.serve.encoder_batch``); a request cancelled
before its pass starts is left out of it. A sentence longer than the model's
positions is a 422 naming it (``attnkit tag`` cuts it instead, with a warning).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

import torch
from pydantic import BaseModel, Field, model_validator

from attnkit.data.token_tags import EncodedWords, collate_words, encode_words
from attnkit.serve.cancellable import live_requests
from attnkit.serve.handles import RequestHandle
from attnkit.serve.model_host import ModelHost, RequestError
from attnkit.serve.schemas import _STRICT, MAX_SENTENCES, Text, Timing

__all__ = [
    "TagJob", "TagRequest", "TagResponse", "encode_sentences", "is_tagger", "tag", "tagged",
]  # fmt: skip


class TagRequest(BaseModel):
    """``POST /v1/tag``: tag the words of each sentence (named entities)."""

    model_config = _STRICT

    text: list[Text] = Field(
        min_length=1, max_length=MAX_SENTENCES, description="sentences, words split at spaces"
    )
    scheme: Literal["bio", "iob2", "iob1", "bioes"] = Field("bio", description="tag scheme")

    @model_validator(mode="after")
    def _words(self) -> TagRequest:
        for i, t in enumerate(self.text):
            if not t.split():
                raise ValueError(f"text[{i}]: holds only whitespace")
        return self


class EntitySpan(BaseModel):
    type: str = Field(description="the entity type (PER, LOC, ...)")
    start: int = Field(description="index of its first word")
    end: int = Field(description="index past its last word")
    text: str = Field(description="its words joined by spaces")


class TaggedSentence(BaseModel):
    words: list[str]
    tags: list[str] = Field(description="one per word, in the request's scheme")
    entities: list[EntitySpan]


class TagResponse(BaseModel):
    results: list[TaggedSentence] = Field(description="one per text, in order")
    timing: Timing


@dataclass(frozen=True)
class TagJob:
    """One tag request: its sentences' words and their encoding."""

    words: list[list[str]]
    encoded: EncodedWords

    @property
    def tokens(self) -> int:
        return sum(self.encoded.lengths)


def is_tagger(engine: ModelHost) -> bool:
    """Whether ``engine`` holds an encoder-only checkpoint that tags entities."""
    from attnkit.evaluation.token_classification import is_tagger as tags_entities

    return engine.is_encoder and tags_entities(engine.model.config)


def encode_sentences(engine: ModelHost, texts: Sequence[str]) -> TagJob:
    """The words and ids of each sentence; one that does not fit is a 422 naming it."""
    words = [t.split() for t in texts]
    encoded = encode_words(engine.tokenizer, words, engine.max_len)
    for i, (kept, sentence) in enumerate(zip(encoded.first, words)):
        if len(kept) < len(sentence):
            raise RequestError(
                f"text[{i}]: longer than the {engine.max_len} tokens the model reads "
                f"({len(kept)} of its {len(sentence)} words fit)"
            )
    return TagJob(words, encoded)


@torch.no_grad()
def tag(
    engine: ModelHost, jobs: Sequence[TagJob], handles: Sequence[RequestHandle] | None = None
) -> list[list[list[str]] | None]:
    """Each request's BIO tags ``[sentence][word]``, every sentence of every request in
    one padded pass."""
    from attnkit.data.tag_schemes import to_bio
    from attnkit.evaluation.token_classification import token_logits

    live = live_requests(handles, len(jobs))
    results: list[list[list[str]] | None] = [None] * len(jobs)
    if not live:
        return results
    ids = [x for i in live for x in jobs[i].encoded.ids]
    batch = collate_words(ids, None, engine.tokenizer.pad_id).to(engine.device)
    best = token_logits(engine.model, batch.ids).argmax(-1).tolist()
    names = engine.model.config.label_names
    n = 0
    for i in live:
        tags = []
        for starts in jobs[i].encoded.first:
            tags.append(to_bio([names[best[n][p]] if p >= 0 else "O" for p in starts], "bio"))
            n += 1
        results[i] = tags
    return results


class EntityJSON(TypedDict):
    """One entity of the response (``EntitySpan``)."""

    type: str
    start: int
    end: int
    text: str


class TaggedJSON(TypedDict):
    """One sentence of the response (``TaggedSentence``)."""

    words: list[str]
    tags: list[str]
    entities: list[EntityJSON]


def tagged(words: list[str], tags: list[str], scheme: str) -> TaggedJSON:
    """One sentence of the response: its words, its tags in ``scheme``, its entities."""
    from attnkit.data.tag_schemes import entities, from_bio

    spans: list[EntityJSON] = [
        {"type": e.type, "start": e.start, "end": e.end, "text": " ".join(words[e.start : e.end])}
        for e in entities(tags)
    ]
    return {"words": words, "tags": from_bio(tags, scheme), "entities": spans}
