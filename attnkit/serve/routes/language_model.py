"""The router of decoder-only checkpoints: ``POST /v1/generate`` and OpenAI's
``POST /v1/chat/completions`` and ``POST /v1/completions``.

Generation joins the continuous batch (``attnkit.serve.continuous``: the
batcher key ``GENERATE``, its runner the ``ContinuousGenerator``) where the model
allows it, else each request is decoded alone in the worker. The OpenAI
answers' shapes and the stream of server-sent events are ``attnkit.serve.openai_api``'s.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from attnkit import jsonio
from attnkit.serve.completion import Completion, OnDelta, generate_choices
from attnkit.serve.continuous import GENERATE, GenerationJob
from attnkit.serve.deps import Handle, timing
from attnkit.serve.fairness import row_share, run_shared, split
from attnkit.serve.handles import RequestHandle, watch_disconnect
from attnkit.serve.model_host import ModelHost, RequestError
from attnkit.serve.model_roles import LanguageModelRole, note_of
from attnkit.serve.openai_api import COMPLETIONS_DEFAULT_TOKENS, Answer, model_name, stream
from attnkit.serve.openai_schemas import ChatCompletionRequest, CompletionRequest, _Sampling
from attnkit.serve.routes.base import ServedRouter, ServerParts, token_budget
from attnkit.serve.schemas import GenerateRequest, GenerateResponse
from attnkit.serve.stall import StreamBacklog

if TYPE_CHECKING:
    from attnkit.data.chat import ChatTemplate

__all__ = ["ROUTER"]


def _build(parts: ServerParts) -> APIRouter:
    engine, batcher, settings, generator = (
        parts.engine, parts.batcher, parts.settings, parts.generator,
    )  # fmt: skip
    router = APIRouter()

    @router.post("/v1/generate", response_model=GenerateResponse,
                 response_model_exclude_none=True)  # fmt: skip
    async def generate(req: GenerateRequest, handle: Handle) -> dict[str, object]:
        """Continue a prompt (seeded sampling; temperature 0 is greedy)."""
        started = time.monotonic()
        token_budget(settings, req.max_new_tokens, handle, "max_new_tokens")
        prompt = engine.encode_prompt(req.prompt)
        top_k = min(req.top_k, engine.vocab_rows)
        job = GenerationJob(prompt, 1, req.max_new_tokens, req.temperature, req.top_p, req.seed,
                            top_k=top_k, until_eos=False)  # fmt: skip
        if generator is not None and generator.fits_alone(job):  # joins the running batch
            joined, info = await batcher.submit(GENERATE, job, cost=1, handle=handle)
            # the continuous runner of GENERATE answers each job with its Completion
            new: list[int] = cast(Completion, joined).choices[0].ids
        else:  # alone: a model with absolute positions, or past the context (sliding window)
            new, info = await batcher.call(
                lambda: engine.generate(prompt, max_new_tokens=req.max_new_tokens,
                                        temperature=req.temperature, top_k=req.top_k,
                                        top_p=req.top_p, seed=req.seed, handle=handle),
                handle=handle,
            )  # fmt: skip
        decode = engine.tokenizer.decode
        full, head = decode([*prompt, *new]), decode(prompt)
        answer: dict[str, object] = {
            # decoding prompt + new keeps BPE word boundaries that decode(new) would lose
            "text": full[len(head) :] if full.startswith(head) else decode(new),
            "full_text": full,
            "new_tokens": len(new),
            "timing": timing(info, started),
        }
        if req.explore:
            payload, _ = await batcher.call(lambda: engine.causal_payload(prompt, new),
                                            handle=handle)  # fmt: skip
            answer["explore"], answer["explore_note"] = payload, note_of(engine.role)
        return answer

    completions = _Completions(parts)

    @router.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request) -> Response:
        """OpenAI's chat completion: the messages in the model's chat template, continued."""
        prompt = completions.chat_prompt(req)
        answer = Answer(True, completions.model_id)
        return await completions.run(request, req, [prompt], answer, settings.max_new_tokens)

    @router.post("/v1/completions")
    async def text_completions(req: CompletionRequest, request: Request) -> Response:
        """OpenAI's (legacy) text completion: each prompt continued."""
        texts = req.prompts()
        field = "prompt" if len(texts) == 1 else "prompt[{}]"
        prompts = [completions.encode(t, field.format(i)) for i, t in enumerate(texts)]
        answer = Answer(False, completions.model_id, texts if req.echo else ())
        return await completions.run(request, req, prompts, answer, COMPLETIONS_DEFAULT_TOKENS)

    return router


class _Completions:
    """The OpenAI completions' work: prompts checked and encoded, then decoded (module doc
    of ``attnkit.serve.openai_api``)."""

    def __init__(self, parts: ServerParts) -> None:
        self.parts = parts
        self.engine: ModelHost = parts.engine
        self.model_id = model_name(parts.engine.loaded.directory)
        self.share = row_share(parts.settings.max_generation_rows,
                               parts.settings.max_rows_per_request)  # fmt: skip
        self._template: ChatTemplate | None = None  # the tokenizer's, read on first use

    def encode(self, text: str, field: str) -> list[int]:
        engine = self.engine
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

    def chat_prompt(self, req: ChatCompletionRequest) -> list[int]:
        from attnkit.data.chat import chat_template_of
        from attnkit.errors import DataError

        try:
            if self._template is None:
                self._template = chat_template_of(self.engine.tokenizer)
            template = self._template
            messages = [
                {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                for m in req.messages
            ]
            text = template.render(messages, add_generation_prompt=True)
        except DataError as e:
            raise RequestError(
                f"messages: {e}; POST /v1/completions takes plain text",
                status=400, param="messages", code="no_chat_template",
            ) from None  # fmt: skip
        return self.encode(text, "messages")

    def token_budget(self, req: _Sampling, default: int) -> int:
        limit = self.parts.settings.max_new_tokens
        requested = req.requested_tokens()
        if requested is None:
            return min(default, limit)
        if requested > limit:
            field = "max_completion_tokens" if requested != req.max_tokens else "max_tokens"
            raise RequestError(
                f"{field}: {requested} is over this server's limit of {limit} (--max-new-tokens)",
                status=400, param=field, code="max_tokens_over_limit",
            )  # fmt: skip
        return requested

    async def run(
        self,
        request: Request,
        req: _Sampling,
        prompts: list[list[int]],
        answer: Answer,
        default: int,
    ) -> Response:
        settings, batcher, generator = self.parts.settings, self.parts.batcher, self.parts.generator
        engine, share = self.engine, self.share
        max_tokens = self.token_budget(req, default)
        seed = req.seed if req.seed is not None else secrets.randbits(63)
        handle = RequestHandle(timeout=settings.request_timeout, max_new_tokens=max_tokens)
        jobs = [
            GenerationJob(prompt, req.n, max_tokens, req.temperature, req.top_p, seed,
                          req.stops(), first_index=k * req.n)
            for k, prompt in enumerate(prompts)
        ]  # fmt: skip

        def decode_alone(job: GenerationJob) -> Completion:
            return generate_choices(
                engine, job.prompt, n=job.n, max_tokens=job.max_tokens,
                temperature=job.temperature, top_p=job.top_p, seed=job.seed, stops=job.stops,
                handle=handle, on_delta=job.on_delta, first_index=job.first_index,
            )  # fmt: skip

        async def execute(on_delta: OnDelta | None) -> list[Completion]:
            for job in jobs:
                job.on_delta = on_delta
            parts = split(jobs, share)  # a few rows at a time: others join too (fairness)
            if generator is not None and all(generator.fits_alone(j) for _, j in parts):

                async def submit(job: GenerationJob) -> Completion:
                    completion, _ = await batcher.submit(GENERATE, job, cost=job.n, handle=handle)
                    return cast(Completion, completion)  # GENERATE's runner answers so

                return await run_shared(parts, len(jobs), share, submit)
            alone, _ = await batcher.call(lambda: [decode_alone(j) for j in jobs], handle=handle)
            return alone

        if not req.stream:
            watcher = watch_disconnect(request.receive, handle)
            try:
                done = await execute(None)
            finally:
                watcher.cancel()
            return JSONResponse(jsonio.finite_tree(answer.whole(done)))
        include_usage = req.stream_options is not None and req.stream_options.include_usage
        backlog = StreamBacklog(handle, settings.stall_timeout)
        events = stream(request, execute, backlog, answer, len(prompts) * req.n, include_usage)
        return StreamingResponse(
            events, media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )  # fmt: skip


def _refusal(engine: ModelHost, endpoint: str) -> RequestError:
    return engine.wrong_model(LanguageModelRole.kind, endpoint)


ROUTER = ServedRouter(
    "language_model", _build, offered=lambda engine: engine.generates, refusal=_refusal
)
