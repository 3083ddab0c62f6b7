"""What differs between the kinds of model a server holds, as one object per kind.

``ModelHost`` holds one ``ModelRole``, chosen once from the checkpoint's family
(``ROLES``, the one table keyed by the family's kind): the endpoint that serves
the model, the explorer page's form and the URL it posts to, what
``/v1/explore`` checks before queueing and how it explores a text. The server
and ``attnkit explore`` ask the role; nothing else branches on the kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from torch import nn

from attnkit.decoding.common import DecodeResult
from attnkit.serve.explore_payloads import EXPLORE_NOTES
from attnkit.serve.handles import RequestHandle
from attnkit.serve.mask_filling import MaskCandidates, MaskedText
from attnkit.serve.model_host_types import KIND_ENDPOINTS, ExplorePayload, TranslatesSources
from attnkit.visualize.explorer.page import ServedForm

__all__ = [
    "CLASSIFIER_FORM",
    "PAGE_FORMS",
    "ROLES",
    "RoleHost",
    "EncoderRole",
    "ExploreOptions",
    "LanguageModelRole",
    "ModelRole",
    "TranslationRole",
    "labels_texts",
    "note_of",
]

# The explorer page's text box, by the kind of model served: its button says what it does.
PAGE_FORMS: dict[str, ServedForm] = {
    "seq2seq": ServedForm("Translate", "Text to translate (Ctrl+Enter)", "translating\u2026"),
    "causal_lm": ServedForm(
        "Generate", "Prompt to continue (Ctrl+Enter)", "generating\u2026", search=False
    ),
    "masked_lm": ServedForm(
        "Fill masks", "Text with [MASK] markers (Ctrl+Enter)", "filling\u2026", search=False
    ),
}
# A text classifier's page (an encoder-only checkpoint with a classification head). The
# page renders attention payloads only, so its button runs /v1/explore on the text and
# the note says where the labels are.
CLASSIFIER_FORM = ServedForm(
    "Classify",
    "Text to classify (Ctrl+Enter)",
    "reading\u2026",
    search=False,
    note="this page shows the classifier's attention over the text, not its label: "
    "POST the text to /v1/classify for the predicted label and probabilities",
)


@dataclass(frozen=True)
class ExploreOptions:
    """How ``ModelRole.explore`` decodes: beam and n-best (translation), new tokens (LMs);
    the request field a bad text is reported under; the request's handle (cancellation)."""

    beam: int = 4
    nbest: int = 1
    max_new_tokens: int = 20
    field: str = "text[0]"
    handle: RequestHandle | None = None


class RoleHost(TranslatesSources, Protocol):
    """What a role uses of its host (``ModelHost``): the model and its operations."""

    @property
    def model(self) -> nn.Module: ...

    def encode_sources(self, texts: Sequence[str], field: str = "text") -> list[list[int]]: ...

    def translation_payload(self, src: Sequence[int], result: DecodeResult) -> ExplorePayload: ...

    def encode_prompt(self, prompt: str, field: str = "prompt") -> list[int]: ...

    def generate(
        self,
        prompt: Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float,
        top_k: int,
        top_p: float,
        seed: int,
        handle: RequestHandle | None = None,
    ) -> list[int]: ...

    def causal_payload(self, prompt: Sequence[int], new: Sequence[int]) -> ExplorePayload: ...

    def encode_masked(self, text: str, marker: str, field: str = "text") -> MaskedText: ...

    def fill_mask(self, masked: MaskedText, top_k: int) -> tuple[str, list[MaskCandidates]]: ...

    def masked_payload(self, masked: MaskedText, filled: str) -> ExplorePayload: ...


class ModelRole(Protocol):
    """The behaviour of one kind of model (module doc)."""

    kind: str  # the family's kind, as /v1/health and /v1/model report it
    endpoint: str  # the endpoint that serves it (and the one a refusal points to)
    page_url: str  # what the explorer page posts to

    def form(self, host: RoleHost) -> ServedForm:
        """The explorer page's text box."""
        ...

    def explore_tokens(self, host: RoleHost, text: str, max_new_tokens: int) -> int | None:
        """Check ``text`` before it is queued (a 422); the new tokens it will generate,
        for the server's budget (``None``: it generates none)."""
        ...

    def explore(self, host: RoleHost, text: str, options: ExploreOptions) -> ExplorePayload:
        """The explorer payload of ``text`` (runs the model: the worker thread)."""
        ...


def labels_texts(config: object) -> bool:
    """Whether an encoder-only model's ``config`` has a text classification head (labels
    per text, not per token)."""
    return (
        int(getattr(config, "num_labels", 0)) > 0
        and getattr(config, "label_level", "sequence") == "sequence"  # not a token head
    )


def _check(handle: RequestHandle | None) -> None:
    """Stop here if ``handle`` was cancelled (before a pass that cannot stop midway)."""
    if handle is not None:
        handle.check()


class _Role:
    """What most kinds share: the page posts to /v1/explore with the kind's own form, and
    exploring generates no new tokens."""

    kind = ""
    page_url = "/v1/explore"

    def form(self, host: RoleHost) -> ServedForm:
        return PAGE_FORMS[self.kind]

    def explore_tokens(self, host: RoleHost, text: str, max_new_tokens: int) -> int | None:
        return None


class TranslationRole(_Role):
    """An encoder-decoder: beam search, then the teacher-forced pass with weights."""

    kind = "seq2seq"
    endpoint = KIND_ENDPOINTS["seq2seq"]
    page_url = "/v1/translate"

    def explore_tokens(self, host: RoleHost, text: str, max_new_tokens: int) -> int | None:
        host.encode_sources([text])  # a 422 before queueing
        return None

    def explore(self, host: RoleHost, text: str, options: ExploreOptions) -> ExplorePayload:
        beam, handle = options.beam, options.handle
        src = host.encode_sources([text], options.field)[0]
        handles = None if handle is None else [handle]
        result = host.translate(
            [src], beam=beam, alpha=0.6, nbest=min(options.nbest, beam), handles=handles
        )[0]
        _check(handle)
        return host.translation_payload(src, result)


class LanguageModelRole(_Role):
    """A decoder-only LM: a greedy continuation, then prompt + continuation with weights."""

    kind = "causal_lm"
    endpoint = KIND_ENDPOINTS["causal_lm"]

    def explore_tokens(self, host: RoleHost, text: str, max_new_tokens: int) -> int | None:
        return max_new_tokens

    def explore(self, host: RoleHost, text: str, options: ExploreOptions) -> ExplorePayload:
        prompt = host.encode_prompt(text, options.field)
        new = host.generate(prompt, max_new_tokens=options.max_new_tokens, temperature=0.0,
                            top_k=0, top_p=1.0, seed=0, handle=options.handle)  # fmt: skip
        _check(options.handle)
        return host.causal_payload(prompt, new)


class EncoderRole(_Role):
    """An encoder-only model: the text as it is, its mask markers filled in the output."""

    kind = "masked_lm"
    endpoint = KIND_ENDPOINTS["masked_lm"]

    def form(self, host: RoleHost) -> ServedForm:
        return CLASSIFIER_FORM if labels_texts(host.model.config) else PAGE_FORMS[self.kind]

    def explore(self, host: RoleHost, text: str, options: ExploreOptions) -> ExplorePayload:
        masked = host.encode_masked(text, "[MASK]", options.field)
        filled, _ = host.fill_mask(masked, 1) if masked.positions else (text, [])
        return host.masked_payload(masked, filled)


# The role of each family kind a server can hold (``load_for("serve")`` refuses the rest).
ROLES: dict[str, type[TranslationRole] | type[LanguageModelRole] | type[EncoderRole]] = {
    "seq2seq": TranslationRole,
    "causal_lm": LanguageModelRole,
    "masked_lm": EncoderRole,
}


def note_of(role: ModelRole) -> str:
    """How ``role``'s explorer payloads are made (``explore_payloads.EXPLORE_NOTES``)."""
    return EXPLORE_NOTES[role.kind]
