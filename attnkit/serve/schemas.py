"""Request and response bodies of the HTTP API, as pydantic models.

Requests are strict (``extra="forbid"``, no string-to-number coercion): an
unknown field or a wrong type is a 422 naming the field, never a guess.
Limits that do not depend on the model (sentences per request, characters
per text, beam width) live here; limits in tokens (the model's positions)
are checked once the text is tokenized (``attnkit.serve.model_host``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_SENTENCES = 64  # texts in one /v1/translate request
MAX_CHARS = 2000  # characters in one text or prompt
MAX_BEAM = 16
MAX_NEW_TOKENS = 1024
MAX_TOP_K = 100  # fill-mask candidates

Text = Annotated[str, Field(min_length=1, max_length=MAX_CHARS)]
_STRICT = ConfigDict(extra="forbid", strict=True)


def _not_blank(value: str, name: str) -> str:
    if not value.strip():
        raise ValueError(f"{name}: holds only whitespace")
    return value


class TranslateRequest(BaseModel):
    """``POST /v1/translate``: translate each text with beam search (``beam`` 1 = greedy)."""

    model_config = _STRICT

    text: list[Text] = Field(
        min_length=1, max_length=MAX_SENTENCES, description="sentences to translate"
    )
    beam: int = Field(4, ge=1, le=MAX_BEAM, description="beam size (1: greedy search)")
    alpha: float = Field(
        0.6,
        ge=0.0,
        le=10.0,
        allow_inf_nan=False,
        description="GNMT length penalty alpha (omitted: the server's --alpha, 0.6 unless set)",
    )
    nbest: int = Field(1, ge=1, le=MAX_BEAM, description="hypotheses per sentence (<= beam)")
    explore: bool = Field(False, description="add the explorer payload of the first text")

    @field_validator("text")
    @classmethod
    def _texts_not_blank(cls, texts: list[str]) -> list[str]:
        for i, t in enumerate(texts):
            _not_blank(t, f"text[{i}]")
        return texts

    @model_validator(mode="after")
    def _nbest_within_beam(self) -> TranslateRequest:
        if self.nbest > self.beam:
            raise ValueError(f"nbest: {self.nbest} must be <= beam ({self.beam})")
        return self


class GenerateRequest(BaseModel):
    """``POST /v1/generate``: continue a prompt with a decoder-only LM."""

    model_config = _STRICT

    prompt: Text = Field(description="text to continue")
    max_new_tokens: int = Field(64, ge=0, le=MAX_NEW_TOKENS, description="tokens to generate")
    temperature: float = Field(1.0, ge=0.0, le=100.0, allow_inf_nan=False, description="0 = greedy")
    top_k: int = Field(0, ge=0, description="sample from the k best (0 = all)")
    top_p: float = Field(
        1.0, gt=0.0, le=1.0, allow_inf_nan=False, description="nucleus sampling mass"
    )
    seed: int = Field(0, ge=0, le=2**63 - 1, description="sampling seed (reproducible)")
    explore: bool = Field(False, description="add the explorer payload of prompt + continuation")

    @field_validator("prompt")
    @classmethod
    def _prompt_not_blank(cls, prompt: str) -> str:
        return _not_blank(prompt, "prompt")


class FillMaskRequest(BaseModel):
    """``POST /v1/fill-mask``: predict every ``[MASK]`` of ``text`` with a masked LM."""

    model_config = _STRICT

    text: Text = Field(description="text with one or more mask markers")
    top_k: int = Field(5, ge=1, le=MAX_TOP_K, description="candidates per mask")
    mask_token: str = Field("[MASK]", min_length=1, max_length=32, description="the marker")
    explore: bool = Field(False, description="add the explorer payload of the input")

    @model_validator(mode="after")
    def _has_mask(self) -> FillMaskRequest:
        if self.mask_token not in self.text:
            raise ValueError(f"text: holds no {self.mask_token}; mark the missing token(s) with it")
        return self


class ClassifyRequest(BaseModel):
    """``POST /v1/classify``: label each text (or text pair) with a text classifier."""

    model_config = _STRICT

    text: list[Text] = Field(min_length=1, max_length=MAX_SENTENCES, description="texts to label")
    text_pair: list[Text] | None = Field(
        None, description="sentence-pair classifiers: the second text of each pair"
    )

    @model_validator(mode="after")
    def _pairs_match(self) -> ClassifyRequest:
        for i, t in enumerate(self.text):
            _not_blank(t, f"text[{i}]")
        if self.text_pair is not None:
            if len(self.text_pair) != len(self.text):
                raise ValueError(
                    f"text_pair: {len(self.text_pair)} texts for {len(self.text)} in text"
                )
            for i, t in enumerate(self.text_pair):
                _not_blank(t, f"text_pair[{i}]")
        return self


class ExploreRequest(BaseModel):
    """``POST /v1/explore``: the explorer page's own request, for every family.

    Translation models translate ``text[0]`` (``beam``, ``nbest``); causal LMs
    continue it greedily for ``max_new_tokens``; masked LMs read it as it is
    (``[MASK]`` markers are filled in ``output``).
    """

    model_config = _STRICT

    text: list[Text] = Field(min_length=1, max_length=1, description="one text")
    beam: int = Field(4, ge=1, le=MAX_BEAM)
    nbest: int = Field(1, ge=1, le=MAX_BEAM)
    explore: bool = Field(True, description="always true (the page sends it)")
    max_new_tokens: int = Field(20, ge=0, le=MAX_NEW_TOKENS, description="causal LMs only")

    @field_validator("text")
    @classmethod
    def _text_not_blank(cls, texts: list[str]) -> list[str]:
        return [_not_blank(texts[0], "text[0]")]

    @model_validator(mode="after")
    def _nbest_within_beam(self) -> ExploreRequest:
        if self.nbest > self.beam:
            raise ValueError(f"nbest: {self.nbest} must be <= beam ({self.beam})")
        return self


# -- responses (documentation in /docs; the handlers return plain dicts) ---------------


class Candidate(BaseModel):
    text: str
    score: float | None = Field(description="summed log-probability of the tokens (EOS included)")


class Timing(BaseModel):
    queue_ms: float = Field(description="time waiting for the worker and the batch")
    compute_ms: float = Field(description="time of the batch (or job) this request was in")
    total_ms: float
    batch_requests: int = Field(1, description="requests decoded together")
    batch_sentences: int = Field(1, description="sentences decoded together")


class TranslateResponse(BaseModel):
    translations: list[str]
    scores: list[float | None]
    nbest: list[list[Candidate]]
    timing: Timing
    explore: dict[str, object] | None = None


class GenerateResponse(BaseModel):
    text: str = Field(description="the continuation only")
    full_text: str = Field(description="prompt + continuation")
    new_tokens: int
    timing: Timing
    explore: dict[str, object] | None = None
    explore_note: str | None = None


class MaskPrediction(BaseModel):
    position: int = Field(description="token index of the mask in the input")
    candidates: list[Candidate] = Field(description="score: probability")


class FillMaskResponse(BaseModel):
    filled: str
    masks: list[MaskPrediction]
    timing: Timing
    explore: dict[str, object] | None = None
    explore_note: str | None = None


class LabelPrediction(BaseModel):
    label: str = Field(description="the most likely label")
    probability: float = Field(description="its probability")
    probabilities: dict[str, float] = Field(description="every label's probability")


class ClassifyResponse(BaseModel):
    predictions: list[LabelPrediction] = Field(description="one per text, in order")
    timing: Timing


class ExploreResponse(BaseModel):
    explore: dict[str, object]
    explore_note: str
    output: str


class ErrorResponse(BaseModel):
    error: str = Field(description="one line naming the field or the right endpoint")
