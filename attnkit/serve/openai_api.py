"""OpenAI-compatible routes for decoder-only checkpoints: chat, completions, models.

``add_openai_routes`` adds to the app:

* ``POST /v1/chat/completions``: the messages written in the checkpoint
  tokenizer's chat template (``attnkit.data.chat``, as ``attnkit generate
  --chat``), ending with the assistant's header, then continued;
* ``POST /v1/completions``: each prompt continued (``echo`` puts it first);
* ``GET /v1/models`` and ``GET /v1/models/{id}``: the one model, named after
  its run (or checkpoint) directory; requests may name any model: the server
  has one.

Answers are OpenAI's objects (``chat.completion``, ``text_completion``) with
``usage`` token counts; ``"stream": true`` answers server-sent events, one
``data: {chunk}`` per piece of text as the tokens are drawn, the last chunk
carrying ``usage`` (or, with ``stream_options.include_usage``, a chunk of its
own with no choices, as OpenAI sends it), then ``data: [DONE]``. Errors are
OpenAI's error object with 4xx (``attnkit.serve.error_shape``); an error once
the stream has begun comes as one ``data: {"error": ...}`` event.

The work runs in the model worker (``DynamicBatcher.call``) through the same
request handles as attnkit's own endpoints: ``max_tokens`` is refused past the
server's ``--max-new-tokens``, a request is cancelled past ``--request-timeout``,
and a client that disconnects (or leaves a stream unread for ``--stall-timeout``:
``attnkit.serve.stall``) frees the worker at the next decoding step. A request
holds at most ``--max-rows-per-request`` rows of the running batch at once
(``attnkit.serve.fairness``).
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.params import Depends
from fastapi.responses import JSONResponse, StreamingResponse

from attnkit import jsonio
from attnkit.serve.batcher import BatcherClosed, DynamicBatcher
from attnkit.serve.completion import Completion, OnDelta, generate_choices
from attnkit.serve.continuous import GENERATE, ContinuousGenerator, GenerationJob
from attnkit.serve.error_shape import error_body
from attnkit.serve.fairness import row_share, run_shared, split
from attnkit.serve.handles import CLIENT_GONE, RequestCancelled, RequestHandle, watch_disconnect
from attnkit.serve.model_host import ModelHost, RequestError
from attnkit.serve.openai_schemas import ChatCompletionRequest, CompletionRequest, _Sampling
from attnkit.serve.settings import ServeSettings
from attnkit.serve.stall import StreamBacklog

__all__ = ["OPENAI_ENDPOINTS", "add_openai_routes"]

OPENAI_ENDPOINTS = ("POST /v1/chat/completions", "POST /v1/completions", "GET /v1/models")

COMPLETIONS_DEFAULT_TOKENS = 16  # OpenAI's default max_tokens for /v1/completions
_DONE = b"data: [DONE]\n\n"


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + jsonio.dumps(data, ensure_ascii=False).encode("utf-8") + b"\n\n"


class _Answer:
    """One request's identity and the shape of its objects (chat or text completion)."""

    def __init__(self, chat: bool, model: str, echo: Sequence[str] = ()) -> None:
        self.chat, self.model, self.echo = chat, model, echo
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _head(self, chunk: bool) -> dict[str, Any]:
        kind = "chat.completion" if self.chat else "text_completion"
        obj = f"{kind}.chunk" if chunk and self.chat else kind
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def choice(self, index: int, text: str, reason: str | None, *, chunk: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"index": index}
        if self.chat and chunk:
            out["delta"] = {"content": text} if text else {}
        elif self.chat:
            out["message"] = {"role": "assistant", "content": text}
        else:
            out["text"] = text
        out["logprobs"] = None
        out["finish_reason"] = reason
        return out

    def body(self, choices: list[dict[str, Any]], *, chunk: bool) -> dict[str, Any]:
        return {**self._head(chunk), "choices": choices, "system_fingerprint": None}

    def whole(self, completions: Sequence[Completion]) -> dict[str, Any]:
        """The non-streaming answer."""
        choices = []
        for k, completion in enumerate(completions):
            n = len(completion.choices)
            for j, c in enumerate(completion.choices):
                text = (self.echo[k] if self.echo else "") + c.text
                choices.append(self.choice(k * n + j, text, c.openai_reason, chunk=False))
        return {**self.body(choices, chunk=False), "usage": usage(completions)}


def model_name(directory: Path) -> str:
    """The model's name in ``/v1/models``: the run's directory, or the checkpoint's own."""
    if directory.parent.name == "checkpoints" and directory.parent.parent.name:
        return directory.parent.parent.name  # RUN/checkpoints/step_N: the run
    return directory.name


def usage(completions: Sequence[Completion]) -> dict[str, int]:
    """OpenAI's usage: each prompt counted once (whatever ``n``), every drawn token."""
    prompt = sum(c.prompt_tokens for c in completions)
    completion = sum(c.completion_tokens for c in completions)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}  # fmt: skip


def add_openai_routes(
    app: FastAPI,
    engine: ModelHost,
    batcher: DynamicBatcher,
    settings: ServeSettings,
    generator: ContinuousGenerator | None,
    *,
    needs: Callable[[str], Depends],
) -> None:
    """Add the OpenAI-compatible routes (module doc); ``needs(endpoint)`` refuses the
    completions on a model that is no causal LM (400 naming the endpoint that fits).
    With a ``generator`` the requests join its running batch (``attnkit.serve.continuous``);
    without one (or for a request past the model's context) each is decoded alone."""
    model_id = model_name(engine.loaded.directory)
    share = row_share(settings.max_generation_rows, settings.max_rows_per_request)
    created = int(time.time())
    templates: dict[str, Any] = {}

    def encode(text: str, field: str) -> list[int]:
        try:  # JSON may carry a lone surrogate ("\\ud800"): a str no tokenizer takes (a 500)
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise RequestError(f"{field}: not valid Unicode (a lone surrogate, "
                               f"{text[e.start]!a})", param=field) from None  # fmt: skip
        ids = engine.tokenizer.encode(text)
        if not ids:
            raise RequestError(f"{field}: holds no token the tokenizer knows", param=field)
        if len(ids) > engine.max_len:
            raise RequestError(
                f"{field}: {len(ids)} tokens; the model reads at most {engine.max_len}",
                param=field, code="context_length_exceeded",
            )  # fmt: skip
        return ids

    def chat_prompt(req: ChatCompletionRequest) -> list[int]:
        from attnkit.data.chat import chat_template_of
        from attnkit.errors import DataError

        try:
            if "t" not in templates:
                templates["t"] = chat_template_of(engine.tokenizer)
            messages = [
                {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                for m in req.messages
            ]
            text = templates["t"].render(messages, add_generation_prompt=True)
        except DataError as e:
            raise RequestError(
                f"messages: {e}; POST /v1/completions takes plain text",
                status=400, param="messages", code="no_chat_template",
            ) from None  # fmt: skip
        return encode(text, "messages")

    def token_budget(req: _Sampling, default: int) -> int:
        requested = req.requested_tokens()
        if requested is None:
            return min(default, settings.max_new_tokens)
        if requested > settings.max_new_tokens:
            field = "max_completion_tokens" if requested != req.max_tokens else "max_tokens"
            raise RequestError(
                f"{field}: {requested} is over this server's limit of "
                f"{settings.max_new_tokens} (--max-new-tokens)",
                status=400, param=field, code="max_tokens_over_limit",
            )  # fmt: skip
        return requested

    async def run(
        request: Request, req: _Sampling, prompts: list[list[int]], answer: _Answer, default: int
    ) -> Any:
        max_tokens = token_budget(req, default)
        seed = req.seed if req.seed is not None else secrets.randbits(63)
        handle = RequestHandle(timeout=settings.request_timeout, max_new_tokens=max_tokens)

        jobs = [
            GenerationJob(prompt, req.n, max_tokens, req.temperature, req.top_p, seed,
                          req.stops(), first_index=k * req.n)
            for k, prompt in enumerate(prompts)
        ]  # fmt: skip

        async def execute(on_delta: OnDelta | None) -> list[Completion]:
            for job in jobs:
                job.on_delta = on_delta
            parts = split(jobs, share)  # a few rows at a time: others join too (fairness)
            if generator is not None and all(generator.fits_alone(j) for _, j in parts):

                async def submit(job: GenerationJob) -> Completion:
                    completion, _ = await batcher.submit(GENERATE, job, cost=job.n, handle=handle)
                    return completion

                return await run_shared(parts, len(jobs), share, submit)
            alone, _ = await batcher.call(lambda: [decode_alone(j) for j in jobs], handle=handle)
            return list(alone)

        def decode_alone(job: GenerationJob) -> Completion:
            return generate_choices(
                engine, job.prompt, n=job.n, max_tokens=job.max_tokens,
                temperature=job.temperature, top_p=job.top_p, seed=job.seed, stops=job.stops,
                handle=handle, on_delta=job.on_delta, first_index=job.first_index,
            )  # fmt: skip

        if not req.stream:
            watcher = watch_disconnect(request.receive, handle)
            try:
                completions = await execute(None)
            finally:
                watcher.cancel()
            return JSONResponse(jsonio.finite_tree(answer.whole(completions)))
        include_usage = req.stream_options is not None and req.stream_options.include_usage
        backlog = StreamBacklog(handle, settings.stall_timeout)
        events = _stream(request, execute, backlog, answer, len(prompts) * req.n, include_usage)
        return StreamingResponse(
            events, media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )  # fmt: skip

    @app.post("/v1/chat/completions", dependencies=[needs("/v1/chat/completions")])
    async def chat_completions(req: ChatCompletionRequest, request: Request) -> Any:
        """OpenAI's chat completion: the messages in the model's chat template, continued."""
        prompt = chat_prompt(req)
        return await run(request, req, [prompt], _Answer(True, model_id), settings.max_new_tokens)

    @app.post("/v1/completions", dependencies=[needs("/v1/completions")])
    async def completions(req: CompletionRequest, request: Request) -> Any:
        """OpenAI's (legacy) text completion: each prompt continued."""
        texts = req.prompts()
        field = "prompt" if len(texts) == 1 else "prompt[{}]"
        prompts = [encode(t, field.format(i)) for i, t in enumerate(texts)]
        answer = _Answer(False, model_id, texts if req.echo else ())
        return await run(request, req, prompts, answer, COMPLETIONS_DEFAULT_TOKENS)

    def model_card() -> dict[str, Any]:
        return {"id": model_id, "object": "model", "created": created, "owned_by": "attnkit"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        """The one model this server holds (named after its checkpoint directory)."""
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model}")
    async def model(model: str) -> dict[str, Any]:
        """The model, if ``model`` is its name."""
        if model != model_id:
            raise RequestError(f"model: no model {model!r}; this server holds {model_id!r}",
                               status=404, param="model", code="model_not_found")  # fmt: skip
        return model_card()


async def _stream(
    request: Request,
    execute: Callable[[OnDelta | None], Awaitable[list[Completion]]],
    queue: StreamBacklog,
    answer: _Answer,
    total: int,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """The server-sent events of a streamed answer (module doc); ``queue`` holds the
    pieces the worker drew and the client has not taken yet (bounded: ``StreamBacklog``)."""
    loop = asyncio.get_running_loop()
    handle = queue.handle

    def on_delta(index: int, text: str, reason: str | None) -> None:  # the worker thread
        loop.call_soon_threadsafe(queue.put, (index, text, reason))

    def chunk(index: int, text: str, reason: str | None) -> dict[str, Any]:
        return answer.body([answer.choice(index, text, reason, chunk=True)], chunk=True)

    watcher = watch_disconnect(request.receive, handle)
    task = asyncio.ensure_future(execute(on_delta))
    task.add_done_callback(_ended(queue))
    last: dict[str, Any] | None = None  # the last finish chunk waits for the usage
    try:
        for index in range(total):
            if answer.chat:
                yield _sse(answer.body([{"index": index, "delta": {"role": "assistant",
                           "content": ""}, "logprobs": None, "finish_reason": None}],
                           chunk=True))  # fmt: skip
            elif answer.echo:
                yield _sse(chunk(index, answer.echo[index // (total // len(answer.echo))], None))
        finished = 0
        while (item := await queue.get()) is not None:
            for event in _pieces(*item):
                finished += event[2] is not None
                if finished == total and event[2] is not None:
                    last = chunk(*event)
                else:
                    yield _sse(chunk(*event))
        try:
            completions = task.result()
        except (RequestCancelled, BatcherClosed) as e:
            status = e.status if isinstance(e, RequestCancelled) else 503
            yield _sse(error_body(request.url.path, str(e), status))
            yield _DONE
            return
        counts = usage(completions)
        if include_usage:
            if last is not None:
                yield _sse(last)
            yield _sse({**answer.body([], chunk=True), "usage": counts})
        elif last is not None:
            yield _sse({**last, "usage": counts})
        yield _DONE
    finally:
        watcher.cancel()
        if not task.done():  # the client went away (or stopped reading): free the worker
            handle.cancel(CLIENT_GONE)
            task.cancel()


def _ended(queue: StreamBacklog) -> Callable[[asyncio.Future[Any]], None]:
    """What ends a stream's pieces once its job is done (the worker queued them before
    it answered); it also takes the job's error, so that a stream closed early (the
    client gone, shutdown) leaves no "exception was never retrieved"."""

    def done(task: asyncio.Future[Any]) -> None:
        queue.close()
        if not task.cancelled():
            task.exception()

    return done


def _pieces(index: int, text: str, reason: str | None) -> list[tuple[int, str, str | None]]:
    """A delta as OpenAI sends it: the text, then the finish reason in a chunk of its own."""
    if text and reason is not None:
        return [(index, text, None), (index, "", reason)]
    return [(index, text, reason)]
