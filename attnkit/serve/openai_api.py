"""The answers of the OpenAI-compatible routes: chat, completions, models.

The routes are ``attnkit.serve.routes.language_model``'s (the completions) and
``attnkit.serve.routes.common``'s (the models); what they answer is built here:

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
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

from fastapi import Request

from attnkit import jsonio
from attnkit.serve.batcher import BatcherClosed
from attnkit.serve.completion import Completion, OnDelta
from attnkit.serve.error_shape import JSONObject, error_body
from attnkit.serve.handles import CLIENT_GONE, RequestCancelled, watch_disconnect
from attnkit.serve.stall import StreamBacklog

__all__ = ["COMPLETIONS_DEFAULT_TOKENS", "Answer", "model_name", "stream", "usage"]

COMPLETIONS_DEFAULT_TOKENS = 16  # OpenAI's default max_tokens for /v1/completions
_DONE = b"data: [DONE]\n\n"


def _sse(data: JSONObject) -> bytes:
    return b"data: " + jsonio.dumps(data, ensure_ascii=False).encode("utf-8") + b"\n\n"


class Answer:
    """One request's identity and the shape of its objects (chat or text completion)."""

    def __init__(self, chat: bool, model: str, echo: Sequence[str] = ()) -> None:
        self.chat, self.model, self.echo = chat, model, echo
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _head(self, chunk: bool) -> JSONObject:
        kind = "chat.completion" if self.chat else "text_completion"
        obj = f"{kind}.chunk" if chunk and self.chat else kind
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def choice(self, index: int, text: str, reason: str | None, *, chunk: bool) -> JSONObject:
        out: JSONObject = {"index": index}
        if self.chat and chunk:
            out["delta"] = {"content": text} if text else {}
        elif self.chat:
            out["message"] = {"role": "assistant", "content": text}
        else:
            out["text"] = text
        out["logprobs"] = None
        out["finish_reason"] = reason
        return out

    def body(self, choices: list[JSONObject], *, chunk: bool) -> JSONObject:
        return {**self._head(chunk), "choices": choices, "system_fingerprint": None}

    def whole(self, completions: Sequence[Completion]) -> JSONObject:
        """The non-streaming answer."""
        choices: list[JSONObject] = []
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


async def stream(
    request: Request,
    execute: Callable[[OnDelta | None], Awaitable[list[Completion]]],
    queue: StreamBacklog,
    answer: Answer,
    total: int,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """The server-sent events of a streamed answer (module doc); ``queue`` holds the
    pieces the worker drew and the client has not taken yet (bounded: ``StreamBacklog``)."""
    loop = asyncio.get_running_loop()
    handle = queue.handle

    def on_delta(index: int, text: str, reason: str | None) -> None:  # the worker thread
        loop.call_soon_threadsafe(queue.put, (index, text, reason))

    def chunk(index: int, text: str, reason: str | None) -> JSONObject:
        return answer.body([answer.choice(index, text, reason, chunk=True)], chunk=True)

    watcher = watch_disconnect(request.receive, handle)
    task = asyncio.ensure_future(execute(on_delta))
    task.add_done_callback(_ended(queue))
    last: JSONObject | None = None  # the last finish chunk waits for the usage
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


def _ended(queue: StreamBacklog) -> Callable[[asyncio.Future[list[Completion]]], None]:
    """What ends a stream's pieces once its job is done (the worker queued them before
    it answered); it also takes the job's error, so that a stream closed early (the
    client gone, shutdown) leaves no "exception was never retrieved"."""

    def done(task: asyncio.Future[list[Completion]]) -> None:
        queue.close()
        if not task.cancelled():
            task.exception()

    return done


def _pieces(index: int, text: str, reason: str | None) -> list[tuple[int, str, str | None]]:
    """A delta as OpenAI sends it: the text, then the finish reason in a chunk of its own."""
    if text and reason is not None:
        return [(index, text, None), (index, "", reason)]
    return [(index, text, reason)]
