"""The router of encoder-only checkpoints: ``/v1/fill-mask``, ``/v1/classify``, ``/v1/tag``,
``/v1/answer`` and OpenAI's ``/v1/embeddings``.

Each endpoint queues its request as one item of its own batch kind (below):
concurrent requests are answered from one padded pass, each as it would be
alone (``attnkit.serve.encoder_batch``, ``tag_batch``, ``answer_batch``).
Tokenizing and checking stay in the event loop (a 422 never waits for the
model); the explorer payload of a fill-mask request is a job of its own after
the batch. The task heads' endpoints answer 400 on an encoder without that
head (``HEADS``), and a 404 lists only the ones the checkpoint has.
"""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastapi import APIRouter, Depends

from attnkit.serve.answer_batch import AnswerRequest, AnswerResponse, AnswerSpan, answer, is_reader
from attnkit.serve.deps import Handle, timing
from attnkit.serve.encoder_batch import (
    ClassifyJob,
    EmbedJob,
    classify,
    embed,
    encode_examples,
    encode_for_embedding,
    is_classifier,
    label_names,
)
from attnkit.serve.handles import RequestHandle
from attnkit.serve.model_host import Filled, MaskJob, ModelHost, RequestError
from attnkit.serve.model_roles import EncoderRole, note_of
from attnkit.serve.openai_api import model_name
from attnkit.serve.openai_schemas import EmbeddingRequest
from attnkit.serve.routes.base import ServedRouter, ServerParts, submit
from attnkit.serve.schemas import (
    ClassifyRequest,
    ClassifyResponse,
    FillMaskRequest,
    FillMaskResponse,
)
from attnkit.serve.tag_batch import (
    TagJob,
    TagRequest,
    TagResponse,
    encode_sentences,
    is_tagger,
    tagged,
)
from attnkit.serve.tag_batch import tag as tag_jobs

__all__ = [
    "HEADS", "ROUTER", "AnswerBatch", "ClassifyBatch", "EmbedBatch", "FillMaskBatch", "TagBatch",
]  # fmt: skip

Rows = list[list[float]]  # one request's rows: label probabilities, or vectors


# -- the batch kinds: each runs one padded pass over its requests -----------------------


@dataclass(frozen=True)
class FillMaskBatch:
    def run(
        self, engine: ModelHost, payloads: Sequence[MaskJob], handles: Sequence[RequestHandle]
    ) -> list[Filled | None]:
        return engine.fill_masks(payloads, handles)


@dataclass(frozen=True)
class ClassifyBatch:
    def run(
        self, engine: ModelHost, payloads: Sequence[ClassifyJob], handles: Sequence[RequestHandle]
    ) -> list[Rows | None]:
        return classify(engine, payloads, handles)


@dataclass(frozen=True)
class TagBatch:
    def run(
        self, engine: ModelHost, payloads: Sequence[TagJob], handles: Sequence[RequestHandle]
    ) -> list[list[list[str]] | None]:
        return tag_jobs(engine, payloads, handles)


@dataclass(frozen=True)
class AnswerBatch:
    def run(
        self, engine: ModelHost, payloads: Sequence[AnswerRequest], handles: Sequence[RequestHandle]
    ) -> list[AnswerSpan | None]:
        return answer(engine, payloads, handles)


@dataclass(frozen=True)
class EmbedBatch:
    """One checkpoint embeds one way: its pooling and normalisation are the key's."""

    pooling: str
    normalize: bool

    def run(
        self, engine: ModelHost, payloads: Sequence[EmbedJob], handles: Sequence[RequestHandle]
    ) -> list[Rows | None]:
        return embed(engine, payloads, handles, pooling=self.pooling, normalize=self.normalize)


# -- the task heads: which endpoint needs which, and what it answers without it ----------

HEADS: dict[str, tuple[Callable[[ModelHost], bool], str]] = {
    "/v1/classify": (
        is_classifier,
        "/v1/classify needs a text classifier (an encoder-only checkpoint with a "
        "classification head, num_labels > 0), but this checkpoint has none: "
        "use POST /v1/fill-mask",
    ),
    "/v1/tag": (
        is_tagger,
        "/v1/tag needs a token classifier (task: token_classification), but this "
        "checkpoint is not one",
    ),
    "/v1/answer": (
        is_reader,
        "/v1/answer needs an extractive question-answering checkpoint (task: "
        "question_answering, a start/end token head), but this checkpoint has none",
    ),
}


def _head(engine: ModelHost, path: str) -> Callable[[], None]:
    """The dependency that answers 400 on ``path`` unless the checkpoint has its head."""
    has, message = HEADS[path]

    def check() -> None:
        if not has(engine):
            raise RequestError(message, status=400)

    return check


def _build(parts: ServerParts) -> APIRouter:
    engine, batcher = parts.engine, parts.batcher
    router = APIRouter()
    embedding = None
    if engine.is_encoder:
        from attnkit.interop.hf.pooling import embedding_settings

        # An imported sentence-transformers model's own pooling, normalisation and length.
        embedding = embedding_settings(engine.loaded.directory, engine.model.config)

    @router.post("/v1/answer", response_model=AnswerResponse,
                 dependencies=[Depends(_head(engine, "/v1/answer"))])  # fmt: skip
    async def answer_question(req: AnswerRequest, handle: Handle) -> dict[str, object]:
        """The span of the context that answers the question (batched with others)."""
        started = time.monotonic()
        cost = (len(req.question) + len(req.context)) // 4 + 1  # ~tokens; tokenized in the worker
        found, info = await submit(batcher, AnswerBatch(), req, cost=cost, handle=handle)
        return {**found, "timing": timing(info, started)}

    @router.post("/v1/fill-mask", response_model=FillMaskResponse,
                 response_model_exclude_none=True)  # fmt: skip
    async def fill_mask(req: FillMaskRequest, handle: Handle) -> dict[str, object]:
        """Predict every mask marker of the text from both sides (batched with others)."""
        started = time.monotonic()
        masked = engine.encode_masked(req.text, req.mask_token)
        (filled, masks), info = await submit(
            batcher, FillMaskBatch(), MaskJob(masked, req.top_k), cost=len(masked.ids),
            handle=handle,
        )  # fmt: skip
        answer: dict[str, object] = {
            "filled": filled, "masks": masks, "timing": timing(info, started),
        }  # fmt: skip
        if req.explore:
            payload, _ = await batcher.call(lambda: engine.masked_payload(masked, filled),
                                            handle=handle)  # fmt: skip
            answer["explore"], answer["explore_note"] = payload, note_of(engine.role)
        return answer

    @router.post("/v1/classify", response_model=ClassifyResponse,
                 dependencies=[Depends(_head(engine, "/v1/classify"))])  # fmt: skip
    async def classify_texts(req: ClassifyRequest, handle: Handle) -> dict[str, object]:
        """Label each text (or text pair) with the classifier (batched with others)."""
        started = time.monotonic()
        job = encode_examples(engine, req.text, req.text_pair)
        rows, info = await submit(batcher, ClassifyBatch(), job, cost=job.tokens,
                                  sentences=len(job.ids), handle=handle)  # fmt: skip
        names = label_names(engine)
        predictions = []
        for probs in rows:
            best = max(range(len(probs)), key=probs.__getitem__)
            predictions.append({
                "label": names[best],
                "probability": probs[best],
                "probabilities": dict(zip(names, probs, strict=True)),
            })  # fmt: skip
        return {"predictions": predictions, "timing": timing(info, started)}

    @router.post("/v1/embeddings")
    async def embeddings(req: EmbeddingRequest, handle: Handle) -> dict[str, object]:
        """OpenAI's embeddings: one vector per input (batched with other requests)."""
        assert embedding is not None  # the router's refusal answered other kinds of model
        width = int(engine.model.config.d_model)
        if req.dimensions is not None and req.dimensions != width:
            raise RequestError(f"dimensions: this model's vectors have {width}", status=400)
        job = encode_for_embedding(engine, req.texts(), embedding.max_len)
        kind = EmbedBatch(embedding.pooling, embedding.normalize)
        vectors, _ = await submit(batcher, kind, job, cost=job.tokens, sentences=len(job.ids),
                                  handle=handle)  # fmt: skip
        data = []
        for i, vector in enumerate(vectors):
            # base64: the float32 bytes, little-endian, as OpenAI sends them (its Python
            # client asks for this by default and decodes it with NumPy)
            value: str | list[float] = (
                base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
                if req.encoding_format == "base64" else vector
            )  # fmt: skip
            data.append({"object": "embedding", "index": i, "embedding": value})
        tokens = job.tokens
        return {"object": "list", "data": data, "model": model_name(engine.loaded.directory),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}  # fmt: skip

    @router.post("/v1/tag", response_model=TagResponse,
                 dependencies=[Depends(_head(engine, "/v1/tag"))])  # fmt: skip
    async def tag(req: TagRequest, handle: Handle) -> dict[str, object]:
        """Tag the words of each sentence, with its entity spans (batched with others)."""
        started = time.monotonic()
        job = encode_sentences(engine, req.text)
        rows, info = await submit(batcher, TagBatch(), job, cost=job.tokens,
                                  sentences=len(job.words), handle=handle)  # fmt: skip
        results = [tagged(w, t, req.scheme) for w, t in zip(job.words, rows, strict=True)]
        return {"results": results, "timing": timing(info, started)}

    return router


def _refusal(engine: ModelHost, endpoint: str) -> RequestError:
    return engine.wrong_model(EncoderRole.kind, endpoint)


def _lists(engine: ModelHost, endpoint: str) -> bool:
    """Whether a 404 names ``endpoint`` ("POST /v1/tag"): a head's only with that head."""
    head = HEADS.get(endpoint.partition(" ")[2])
    return head is None or head[0](engine)


ROUTER = ServedRouter(
    "encoder", _build, offered=lambda engine: engine.is_encoder, refusal=_refusal, lists=_lists
)
