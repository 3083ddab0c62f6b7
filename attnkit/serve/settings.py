"""The knobs of ``attnkit serve`` (see ``docs/serving.md``), in one place for every route."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServeSettings:
    """The knobs of ``attnkit serve`` (see ``docs/serving.md``)."""

    max_batch_tokens: int = 512  # source tokens x beam per decode batch (the CLI's CPU default)
    max_wait_ms: float = 5.0
    max_batch_sentences: int = 128
    max_body_bytes: int = 256 * 1024
    read_timeout: float = 10.0  # seconds for a whole request body
    threads: int | None = None  # torch intra-op threads in the worker (None: torch's default)
    request_timeout: float | None = 120.0  # time budget of a request, queue included
    max_new_tokens: int = 1024  # token budget of a generation request (<= schemas.MAX_NEW_TOKENS)
    max_generation_rows: int = 16  # rows (choices) in the continuous generation batch
    # rows one request holds at once (its other choices wait their turn; None: a quarter
    # of max_generation_rows): ``attnkit.serve.fairness``
    max_rows_per_request: int | None = None
    # seconds a streamed answer's chunks may wait for a client that stopped reading before
    # the request is cancelled (and a connection whose writes stay paused is cut): ``stall``
    stall_timeout: float = 5.0
    max_connections: int | None = None  # what uvicorn allows (shown in /v1/model; set there)
    alpha: float = 0.6  # alpha of a /v1/translate request that names none (--alpha)
    # threads forming and running translate batches side by side (--engine-workers with
    # --engine ctranslate2, whose decode call is thread-safe; attnkit's model: 1)
    batch_workers: int = 1
