"""What the engine shares with the modules around it, without the engine itself.

``RequestError`` (a request the model cannot serve), the endpoint that serves
each kind of model, the output length rule of /v1/translate and the
``Translator`` protocol of ``serve --engine``. ``attnkit.serve.model_host``
re-exports all of it, so callers import these names from there; the modules the
engine builds on (``mask_filling``, ``explore_payloads``, ``engine_translator``)
import them from here, with no import of the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypedDict

from attnkit.decoding.common import DecodeResult
from attnkit.serve.handles import RequestHandle

__all__ = [
    "KIND_ENDPOINTS",
    "MAX_LEN_B",
    "Candidate",
    "ExploreAnswer",
    "ExplorePayload",
    "RequestError",
    "TranslationJSON",
    "TranslatesSources",
    "Translator",
]

# The explorer page's payload (``attnkit.visualize.explorer.build_payload``): a JSON object.
ExplorePayload = dict[str, object]


class Candidate(TypedDict):
    text: str
    score: float | None  # a log-probability in /v1/translate's n-best; fill-mask: a probability


class TranslationJSON(TypedDict):
    """One translation as /v1/translate answers it (``ModelHost.result_json``)."""

    translation: str
    score: float | None
    nbest: list[Candidate]


class ExploreAnswer(TypedDict):
    """``ModelHost.explore``'s answer: the page's payload, how it was made, the output."""

    explore: ExplorePayload
    explore_note: str
    output: str


# The endpoint (and CLI command) that serves each kind of model.
KIND_ENDPOINTS: dict[str, str] = {
    "seq2seq": "/v1/translate",
    "causal_lm": "/v1/generate",
    "masked_lm": "/v1/fill-mask",
}
MAX_LEN_B = 50  # output length limit = source length + this, as `attnkit translate`


class RequestError(ValueError):
    """A request the model cannot serve; ``status`` is the HTTP status to answer.

    ``param`` and ``code``: the field and a short machine-readable reason, for
    the OpenAI-compatible endpoints' error object (``attnkit.serve.error_shape``).
    """

    def __init__(
        self, message: str, status: int = 422, *, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.param, self.code = param, code


class TranslatesSources(Protocol):
    """Decodes source ids into ``DecodeResult``s (``ModelHost.translate``'s signature)."""

    def translate(
        self,
        sources: Sequence[Sequence[int]],
        *,
        beam: int,
        alpha: float,
        nbest: int,
        handles: Sequence[RequestHandle] | None = None,
    ) -> list[DecodeResult]: ...


class Translator(TranslatesSources, Protocol):
    """What decodes /v1/translate's batches under ``serve --engine`` (``attnkit.serve.
    engine_translator.EngineTranslator``): ``translate``, a check, a description."""

    def check(self, *, beam: int, alpha: float, nbest: int) -> None: ...

    def describe(self) -> dict[str, object]: ...
