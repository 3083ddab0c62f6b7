"""Request bodies of the OpenAI-compatible endpoints, as pydantic models.

The fields are OpenAI's (``/v1/chat/completions``, ``/v1/completions``). What
the server implements: ``max_tokens`` (``max_completion_tokens``),
``temperature`` (0: greedy), ``top_p``, ``n``, ``stop``, ``seed``, ``stream``
(``stream_options.include_usage``), ``echo`` (completions). Fields a client may
send with their neutral value (``presence_penalty: 0``, ``logprobs: false``,
``user``, ``model``: any name, the one model is used) are accepted; anything
else, or a neutral field set to something the server would ignore, is a 400
naming the field, never a silent change of meaning. Unknown fields are refused
as in attnkit's own API (a misspelt name would otherwise be ignored).
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "EmbeddingRequest",
    "MAX_CHOICES",
]

MAX_CHOICES = 8  # n
MAX_PROMPTS = 16  # prompts in one /v1/completions request
MAX_STOPS = 4  # as OpenAI
MAX_MESSAGES = 256
_STRICT = ConfigDict(extra="forbid", strict=True)

Stop = Annotated[str, Field(min_length=1, max_length=256)]


class StreamOptions(BaseModel):
    model_config = _STRICT

    include_usage: bool = Field(
        False, description="a last chunk with no choices and the usage (as OpenAI)"
    )


class TextPart(BaseModel):
    """One part of a message's content (text only: no images)."""

    model_config = _STRICT

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """One turn; ``developer`` is written as ``system`` (what chat templates know)."""

    model_config = _STRICT

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = Field(None, description="accepted, not shown to the model")

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class _Sampling(BaseModel):
    """The fields both endpoints share."""

    model_config = _STRICT

    model: str | None = Field(None, description="any name: the server holds one model")
    max_tokens: int | None = Field(
        None, ge=1, description="tokens to generate at most (<= the server's --max-new-tokens)"
    )
    temperature: float = Field(1.0, ge=0.0, le=2.0, allow_inf_nan=False, description="0: greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False, description="nucleus mass")
    n: int = Field(1, ge=1, le=MAX_CHOICES, description="choices per prompt")
    stream: bool = Field(False, description="server-sent events, ending with data: [DONE]")
    stream_options: StreamOptions | None = None
    stop: Stop | list[Stop] | None = Field(None, description="up to 4 strings that end a choice")
    seed: int | None = Field(
        None, ge=0, le=2**63 - 1, description="sampling seed (reproducible); none: a fresh one"
    )
    presence_penalty: float = Field(0.0, description="0 only")
    frequency_penalty: float = Field(0.0, description="0 only")
    logit_bias: dict[str, float] | None = Field(None, description="empty only")
    user: str | None = Field(None, description="accepted, unused")

    @model_validator(mode="after")
    def _supported(self) -> Self:
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) != 0:
                raise ValueError(f"{name}: not supported by this server (0 only)")
        if self.logit_bias:
            raise ValueError("logit_bias: not supported by this server (leave it out)")
        if isinstance(self.stop, list) and len(self.stop) > MAX_STOPS:
            raise ValueError(f"stop: {len(self.stop)} strings; at most {MAX_STOPS}")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options: only with stream: true")
        return self

    def stops(self) -> list[str]:
        return [] if self.stop is None else [self.stop] if isinstance(self.stop, str) else self.stop

    def requested_tokens(self) -> int | None:
        return self.max_tokens


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``: the messages in the model's chat template, continued."""

    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(None, ge=1, description="max_tokens' newer name")
    logprobs: bool | None = Field(None, description="false only")
    top_logprobs: int | None = Field(None, description="none only")
    response_format: dict[str, object] | None = Field(None, description='{"type": "text"} only')

    @model_validator(mode="after")
    def _chat_supported(self) -> ChatCompletionRequest:
        if self.logprobs or self.top_logprobs:
            raise ValueError("logprobs: not supported by this server")
        if self.response_format not in (None, {"type": "text"}):
            raise ValueError('response_format: only {"type": "text"} is supported')
        if self.max_tokens is not None and self.max_completion_tokens is not None:
            raise ValueError("max_completion_tokens: give it or max_tokens, not both")
        return self

    def requested_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: continue each prompt (the legacy text completion)."""

    prompt: str | list[str] = Field(description=f"one prompt, or a list of up to {MAX_PROMPTS}")
    echo: bool = Field(False, description="put the prompt before each choice's text")
    logprobs: int | None = Field(None, description="none only")
    best_of: int | None = Field(None, description="none or 1 only")
    suffix: str | None = Field(None, description="none only")

    @model_validator(mode="after")
    def _completion_supported(self) -> CompletionRequest:
        if isinstance(self.prompt, list) and not 1 <= len(self.prompt) <= MAX_PROMPTS:
            raise ValueError(f"prompt: {len(self.prompt)} prompts; 1 to {MAX_PROMPTS}")
        if self.logprobs:
            raise ValueError("logprobs: not supported by this server")
        if self.best_of not in (None, 1):
            raise ValueError("best_of: not supported by this server (1 only)")
        if self.suffix:
            raise ValueError("suffix: not supported by this server")
        return self

    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else self.prompt


MAX_EMBEDDING_INPUTS = 256  # inputs in one /v1/embeddings request
MAX_EMBEDDING_CHARS = 100_000  # per input; the model reads its first max_len tokens


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings``: one vector per input text (an encoder-only checkpoint).

    Token-id inputs (lists of integers) are refused: attnkit's vocabulary is the
    checkpoint's, not OpenAI's. ``dimensions`` may only name the model's own width
    (a truncated embedding of a model not trained for it would be worse, silently).
    """

    model_config = _STRICT

    input: str | list[str] = Field(description=f"a text, or a list of up to "
                                               f"{MAX_EMBEDDING_INPUTS}")  # fmt: skip
    model: str | None = Field(None, description="any name: the one model is used")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1, description="the model's width only")
    user: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_token_ids(cls, data: object) -> object:
        value = data.get("input") if isinstance(data, dict) else None
        if isinstance(value, list) and value and not isinstance(value[0], str):
            raise ValueError("input: token-id inputs are not supported; send text")
        return data

    @model_validator(mode="after")
    def _inputs(self) -> EmbeddingRequest:
        texts = self.texts()
        if not 1 <= len(texts) <= MAX_EMBEDDING_INPUTS:
            raise ValueError(f"input: {len(texts)} inputs; 1 to {MAX_EMBEDDING_INPUTS}")
        for i, text in enumerate(texts):
            if not text.strip():
                raise ValueError(f"input[{i}]: empty text")
            if len(text) > MAX_EMBEDDING_CHARS:
                raise ValueError(f"input[{i}]: {len(text)} characters; at most "
                                 f"{MAX_EMBEDDING_CHARS}")  # fmt: skip
        return self

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else self.input
