"""The routes of encoder-only checkpoints: ``/v1/fill-mask``, ``/v1/classify``, ``/v1/tag``,
``/v1/answer`` and OpenAI's ``/v1/embeddings``.

Each queues their request in the dynamic batcher under their own key
(``attnkit.serve.encoder_batch``): concurrent requests are answered from one
padded pass, each as it would be alone. Tokenizing and checking stay in the
event loop (a 422 never waits for the model); the explorer payload of a
fill-mask request is a job of its own after the batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI

from attnkit.serve.answer_batch import ANSWER, AnswerRequest, AnswerResponse, is_reader
from attnkit.serve.batcher import DynamicBatcher
from attnkit.serve.deps import Handle, timing
from attnkit.serve.encoder_batch import (
    CLASSIFY,
    EMBED,
    FILL_MASK,
    encode_examples,
    encode_for_embedding,
    is_classifier,
    label_names,
)
from attnkit.serve.model_host import MaskJob, ModelHost, RequestError
from attnkit.serve.openai_schemas import EmbeddingRequest
from attnkit.serve.schemas import (
    ClassifyRequest,
    ClassifyResponse,
    FillMaskRequest,
    FillMaskResponse,
)
from attnkit.serve.tag_batch import (
    TAG,
    TagRequest,
    TagResponse,
    encode_sentences,
    is_tagger,
    tagged,
)

__all__ = ["add_encoder_routes"]


def add_encoder_routes(
    app: FastAPI,
    engine: ModelHost,
    batcher: DynamicBatcher,
    *,
    needs: Callable[[str, str], Any],
) -> None:
    """Add ``/v1/fill-mask``, ``/v1/classify``, ``/v1/tag`` and ``/v1/embeddings``;
    ``needs(kind, endpoint)``: the dependency that answers 400 on another kind of model."""
    settings = None
    if engine.kind == "masked_lm":
        from attnkit.interop.hf.pooling import embedding_settings

        # An imported sentence-transformers model's own pooling, normalisation and length.
        settings = embedding_settings(engine.loaded.directory, engine.model.config)

    def classifier() -> None:
        engine.require("masked_lm", "/v1/classify")
        if not is_classifier(engine):
            raise RequestError(
                "/v1/classify needs a text classifier (an encoder-only checkpoint with a "
                "classification head, num_labels > 0), but this checkpoint has none: "
                "use POST /v1/fill-mask",
                status=400,
            )

    def reader() -> None:
        engine.require("masked_lm", "/v1/answer")
        if not is_reader(engine):
            raise RequestError(
                "/v1/answer needs an extractive question-answering checkpoint (task: "
                "question_answering, a start/end token head), but this checkpoint has none",
                status=400,
            )

    @app.post("/v1/answer", response_model=AnswerResponse, dependencies=[Depends(reader)])
    async def answer(req: AnswerRequest, handle: Handle) -> dict[str, Any]:
        """The span of the context that answers the question (batched with others)."""
        started = time.monotonic()
        cost = (len(req.question) + len(req.context)) // 4 + 1  # ~tokens; tokenized in the worker
        found, info = await batcher.submit(ANSWER, req, cost=cost, handle=handle)
        return {**found, "timing": timing(info, started)}

    @app.post(
        "/v1/fill-mask",
        response_model=FillMaskResponse,
        response_model_exclude_none=True,
        dependencies=[needs("masked_lm", "/v1/fill-mask")],
    )
    async def fill_mask(req: FillMaskRequest, handle: Handle) -> dict[str, Any]:
        """Predict every mask marker of the text from both sides (batched with others)."""
        from attnkit.serve.model_host import EXPLORE_NOTES

        started = time.monotonic()
        masked = engine.encode_masked(req.text, req.mask_token)
        job = MaskJob(masked, req.top_k)
        (filled, masks), info = await batcher.submit(
            FILL_MASK, job, cost=len(masked.ids), handle=handle
        )
        answer: dict[str, Any] = {"filled": filled, "masks": masks, "timing": timing(info, started)}
        if req.explore:
            payload, _ = await batcher.call(
                lambda: engine.masked_payload(masked, filled), handle=handle
            )
            answer["explore"], answer["explore_note"] = payload, EXPLORE_NOTES["masked_lm"]
        return answer

    @app.post("/v1/classify", response_model=ClassifyResponse, dependencies=[Depends(classifier)])
    async def classify(req: ClassifyRequest, handle: Handle) -> dict[str, Any]:
        """Label each text (or text pair) with the classifier (batched with others)."""
        started = time.monotonic()
        job = encode_examples(engine, req.text, req.text_pair)
        rows, info = await batcher.submit(
            CLASSIFY, job, cost=job.tokens, sentences=len(job.ids), handle=handle
        )
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

    @app.post("/v1/embeddings", dependencies=[needs("masked_lm", "/v1/embeddings")])
    async def embeddings(req: EmbeddingRequest, handle: Handle) -> dict[str, Any]:
        """OpenAI's embeddings: one vector per input (batched with other requests)."""
        import base64
        import struct

        from attnkit.serve.openai_api import model_name

        assert settings is not None  # the dependency refused other kinds of model
        width = int(engine.model.config.d_model)
        if req.dimensions is not None and req.dimensions != width:
            raise RequestError(f"dimensions: this model's vectors have {width}", status=400)
        job = encode_for_embedding(engine, req.texts(), settings.max_len)
        payload = (job, settings.pooling, settings.normalize)
        vectors, _ = await batcher.submit(
            EMBED, payload, cost=job.tokens, sentences=len(job.ids), handle=handle
        )
        data = []
        for i, vector in enumerate(vectors):
            # base64: the float32 bytes, little-endian, as OpenAI sends them (its Python
            # client asks for this by default and decodes it with NumPy)
            value: Any = (base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
                          if req.encoding_format == "base64" else vector)  # fmt: skip
            data.append({"object": "embedding", "index": i, "embedding": value})
        tokens = job.tokens
        return {"object": "list", "data": data, "model": model_name(engine.loaded.directory),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}  # fmt: skip

    def tagger() -> None:
        engine.require("masked_lm", "/v1/tag")
        if not is_tagger(engine):
            raise RequestError(
                "/v1/tag needs a token classifier (task: token_classification), but this "
                "checkpoint is not one",
                status=400,
            )

    @app.post("/v1/tag", response_model=TagResponse, dependencies=[Depends(tagger)])
    async def tag(req: TagRequest, handle: Handle) -> dict[str, Any]:
        """Tag the words of each sentence, with its entity spans (batched with others)."""
        started = time.monotonic()
        job = encode_sentences(engine, req.text)
        rows, info = await batcher.submit(
            TAG, job, cost=job.tokens, sentences=len(job.words), handle=handle
        )
        results = [tagged(w, t, req.scheme) for w, t in zip(job.words, rows, strict=True)]
        return {"results": results, "timing": timing(info, started)}
