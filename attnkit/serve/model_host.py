"""What the server does with its model, with no web framework in sight.

``ModelHost`` wraps a loaded checkpoint. Tokenizing and checking a request
(``encode_*``) is cheap and runs in the event loop; everything that touches
torch (``translate``, ``generate``, ``fill_mask``, the ``*_payload`` passes)
runs in the batcher's worker thread. ``attnkit explore`` uses the same engine
without a server, so an exported page shows what the served page shows.

Errors a client caused are ``RequestError`` (status 422, or 400 for an
endpoint that does not fit the model), their message naming the field.

The decoding methods take the request handles (``attnkit.serve.handles``) of
their work and decode through a ``CancellableStepper``, so a cancelled request
stops at the next step boundary (``RequestCancelled``) and, in a batch, only
the cancelled requests' sentences stop.

The engine is the one object callers hold; the work of some of its methods
lives beside it: the fill-mask encoding and pass in ``attnkit.serve.mask_filling``,
the explorer payloads in ``attnkit.serve.explore_payloads``, and the error, the
endpoint table and the ``Translator`` protocol in ``attnkit.serve.model_host_types``
(all importable from here, as before).

What differs between the kinds of model (the endpoint that serves it, the
explorer's form, what ``explore`` runs) is the engine's ``role``
(``attnkit.serve.model_roles``), chosen once from the checkpoint's family; the
server asks the engine what it offers (``translates``, ``generates``,
``is_encoder``, ``summarizes``) and never compares kinds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cached_property

import torch

from attnkit.checkpoints.loading import LoadedModel
from attnkit.data.tokenizers import Tokenizer
from attnkit.decoding.common import DecodeResult
from attnkit.decoding.protocol import AnyStepper
from attnkit.inference.plan import InferencePlan
from attnkit.serve import explore_payloads, mask_filling
from attnkit.serve.cancellable import CancellableStepper, Owners
from attnkit.serve.explore_payloads import EXPLORE_NOTES
from attnkit.serve.handles import RequestHandle
from attnkit.serve.mask_filling import Filled, MaskCandidates, MaskedText, MaskJob
from attnkit.serve.model_host_types import (
    KIND_ENDPOINTS,
    MAX_LEN_B,
    ExploreAnswer,
    ExplorePayload,
    RequestError,
    TranslationJSON,
    Translator,
)
from attnkit.serve.model_roles import (
    ROLES,
    EncoderRole,
    ExploreOptions,
    LanguageModelRole,
    ModelRole,
    TranslationRole,
    note_of,
)
from attnkit.visualize.explorer.page import ServedForm

# The names callers import from here (their homes: engine_types, mask_filling, explore_payloads).
__all__ = [
    "EXPLORE_NOTES",
    "ExploreAnswer",
    "KIND_ENDPOINTS",
    "MAX_LEN_B",
    "ModelHost",
    "Filled",
    "MaskJob",
    "MaskedText",
    "RequestError",
    "TranslationJSON",
    "Translator",
]


class ModelHost:
    """A checkpoint in eval mode plus the operations the server offers on it."""

    def __init__(
        self,
        loaded: LoadedModel,
        translator: Translator | None = None,
        *,
        plan: InferencePlan | None = None,
        stepper: AnyStepper | None = None,
    ) -> None:
        from attnkit.inference import plan_for_model
        from attnkit.inference import stepper as stepper_of

        self.loaded = loaded
        # ``serve --engine``: what decodes /v1/translate's batches (None: this model)
        self.translator = translator
        self.model = loaded.model
        self.tokenizer: Tokenizer = loaded.tokenizer
        # The family's kind, as /v1/health and /v1/model report it; what depends on it
        # is the role's (``attnkit.serve.model_roles``), chosen here once.
        self.kind: str = loaded.family.kind
        self.role: ModelRole = ROLES[self.kind]()
        self.device = next(self.model.parameters()).device
        self.max_len: int = self.model.config.max_len
        # How the model runs: the inference plan (``attnkit.inference``) that ``serve`` made
        # and prepared (its ``stepper``); else (``explore``) the weights as loaded, on the
        # fast path for their device. Translation and generation decode through the stepper.
        self.plan = plan or plan_for_model(self.model, kind=self.kind)
        if stepper is None and self.plan.has_stepper:
            stepper = stepper_of(self.model, self.plan)
        self.stepper = stepper if self.plan.has_stepper else None
        field = loaded.family.vocab_field  # None only for image classifiers, which load_for refuses
        self.vocab_rows = int(getattr(self.model.config, field)) if field else 0
        # Counted once here, so that /v1/model never touches the model from the event loop.
        self.parameters = int(sum(p.numel() for p in self.model.parameters()))

    # -- checks (event loop) -----------------------------------------------------------

    # -- what it offers --------------------------------------------------------------

    @property
    def translates(self) -> bool:
        """An encoder-decoder: /v1/translate."""
        return isinstance(self.role, TranslationRole)

    @property
    def generates(self) -> bool:
        """A decoder-only LM: /v1/generate and the OpenAI completions."""
        return isinstance(self.role, LanguageModelRole)

    @property
    def is_encoder(self) -> bool:
        """An encoder-only model: /v1/fill-mask and the task heads' endpoints."""
        return isinstance(self.role, EncoderRole)

    @cached_property
    def summarizes(self) -> bool:
        """A checkpoint trained with ``task: summarization`` (its run's config says so):
        /v1/summarize, beside its kind's own endpoints."""
        from attnkit.interop.model_card import run_config

        if not (self.translates or self.generates):
            return False
        run = run_config(self.loaded)
        return isinstance(run, dict) and run.get("task") == "summarization"

    @property
    def page_url(self) -> str:
        """What the explorer page at / posts its text to."""
        return self.role.page_url

    @property
    def page_form(self) -> ServedForm:
        """The explorer page's text box (its button says what it does)."""
        return self.role.form(self)

    def wrong_model(self, needs: str, endpoint: str) -> RequestError:
        """The 400 answering ``endpoint`` (which needs a model of the family kind ``needs``)
        on this model, naming the endpoint that fits it."""
        from attnkit.models.registry import KIND_NAMES

        name = self.loaded.family.name
        article = "an" if name[0] in "aeiou" else "a"
        return RequestError(
            f"{endpoint} needs a {KIND_NAMES[needs]}, but this server holds {article} "
            f"{name} checkpoint (a {KIND_NAMES[self.kind]}): use POST {self.role.endpoint}",
            status=400,
        )

    # -- checks (event loop) -----------------------------------------------------------

    def encode_sources(self, texts: Sequence[str], field: str = "text") -> list[list[int]]:
        """Source ids (EOS last) of each text; a text past the model's positions is a 422.

        ``field`` names the texts in errors: ``text`` gives ``text[2]``, ``text[0]`` itself.
        """
        limit = self.max_len - 1
        sources = []
        for i, text in enumerate(texts):
            ids = self.tokenizer.encode(text)
            if len(ids) > limit:
                where = field if field.endswith("]") or field.startswith("-") else f"{field}[{i}]"
                raise RequestError(f"{where}: {len(ids)} tokens; the model reads at most {limit}")
            sources.append([*ids, self.tokenizer.eos_id])
        return sources

    def encode_prompt(self, prompt: str, field: str = "prompt") -> list[int]:
        ids = self.tokenizer.encode(prompt)
        if not ids:
            raise RequestError(f"{field}: holds no token the tokenizer knows")
        return ids

    def encode_masked(self, text: str, marker: str, field: str = "text") -> MaskedText:
        """The ids of ``text``, each ``marker`` a mask (``mask_filling.encode_masked``)."""
        mask_id = int(self.model.config.mask_id)
        return mask_filling.encode_masked(
            self.tokenizer, mask_id, self.max_len, text, marker, field
        )

    # -- model work (worker thread) ----------------------------------------------------

    @torch.no_grad()
    def translate(
        self,
        sources: Sequence[Sequence[int]],
        *,
        beam: int,
        alpha: float,
        nbest: int,
        handles: Sequence[RequestHandle] | None = None,
    ) -> list[DecodeResult]:
        """One ``DecodeResult`` per source; all sources decoded as one length-sorted batch.

        ``handles[i]``: the request that sent ``sources[i]``; a cancelled request's
        sentences stop at the next step, and the call raises ``RequestCancelled``
        once every request is cancelled.
        """
        from attnkit.decoding.text import decode_ids

        assert self.stepper is not None
        stepper = self.stepper
        if handles is not None:
            stepper = CancellableStepper(stepper, Owners(sources, handles))
        return decode_ids(
            stepper,
            sources,
            beam=beam,
            alpha=alpha,
            nbest=nbest if beam > 1 else 1,
            batch_size=max(1, len(sources)),
            max_len_b=MAX_LEN_B,
            max_len=self.max_len - 1,  # BOS takes the first position
            device=self.device,
            search=self.plan.search,
        )

    def check_search(self, *, beam: int, alpha: float, nbest: int) -> None:
        """A 422 naming the /v1/translate field that ``serve --engine`` cannot honour."""
        if self.translator is not None:
            self.translator.check(beam=beam, alpha=alpha, nbest=nbest)

    def translate_requests(
        self,
        sources: Sequence[Sequence[int]],
        *,
        beam: int,
        alpha: float,
        nbest: int,
        handles: Sequence[RequestHandle] | None = None,
    ) -> list[DecodeResult]:
        """/v1/translate's batch: ``translate``, or the ``serve --engine`` engine's."""
        decode = self.translate if self.translator is None else self.translator.translate
        return decode(sources, beam=beam, alpha=alpha, nbest=nbest, handles=handles)

    def result_json(self, result: DecodeResult, nbest: int) -> TranslationJSON:
        hyps = result.nbest[0][:nbest]
        return {
            "translation": self.tokenizer.decode(result.tokens[0]),
            "score": _finite(result.scores[0]),
            "nbest": [
                {"text": self.tokenizer.decode(h.tokens), "score": _finite(h.score)} for h in hyps
            ],  # fmt: skip
        }

    def translation_payload(self, src: Sequence[int], result: DecodeResult) -> ExplorePayload:
        return explore_payloads.translation_payload(self.loaded, src, result)

    @torch.no_grad()
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
    ) -> list[int]:
        """New token ids after ``prompt``; a seeded generator per request (reproducible).

        A cancelled ``handle`` stops the generation at the next step (``RequestCancelled``).
        """
        from attnkit.decoding.generate import stream

        assert self.stepper is not None
        stepper = self.stepper
        if handle is not None:
            stepper = CancellableStepper(stepper, Owners.single(handle))
        generator = torch.Generator(device=self.device).manual_seed(seed)
        prompt_ids = torch.tensor([list(prompt)], dtype=torch.long, device=self.device)
        return [
            int(t[0])
            for t in stream(
                self.model,
                prompt_ids,
                max_new_tokens,
                temperature=temperature,
                top_k=min(top_k, self.vocab_rows),
                top_p=top_p,
                generator=generator,
                stepper=stepper,
            )
        ]

    def causal_payload(self, prompt: Sequence[int], new: Sequence[int]) -> ExplorePayload:
        return explore_payloads.causal_payload(self.loaded, prompt, new)

    def fill_mask(self, masked: MaskedText, top_k: int) -> tuple[str, list[MaskCandidates]]:
        """The text with every mask filled by its best token, and each mask's candidates."""
        filled = self.fill_masks([MaskJob(masked, top_k)])[0]
        assert filled is not None
        return filled

    def fill_masks(
        self, jobs: Sequence[MaskJob], handles: Sequence[RequestHandle] | None = None
    ) -> list[Filled | None]:
        """``fill_mask`` of every job, in one pass over the right-padded texts (the padding
        is masked out of attention, so each row gets what it gets alone). The jobs whose
        ``handles`` are cancelled are left out (``None``); if all are, this raises."""
        model, tokenizer = self.model, self.tokenizer
        return mask_filling.fill_masks(model, tokenizer, jobs, handles, device=self.device)

    def masked_payload(self, masked: MaskedText, filled: str) -> ExplorePayload:
        return explore_payloads.masked_payload(self.loaded, masked, filled)

    def explore(
        self,
        text: str,
        *,
        beam: int = 4,
        nbest: int = 1,
        max_new_tokens: int = 20,
        field: str = "text[0]",
        handle: RequestHandle | None = None,
    ) -> ExploreAnswer:
        """``{"explore", "explore_note", "output"}`` for one text, for every family.

        Translation: beam search then the teacher-forced pass; causal LM: a
        greedy continuation of ``max_new_tokens``; masked LM: the text as is,
        ``[MASK]`` markers filled in the output (``model_roles``). Runs in the
        calling thread; a cancelled ``handle`` stops the decoding at the next step.
        """
        options = ExploreOptions(beam, nbest, max_new_tokens, field, handle)
        payload = self.role.explore(self, text, options)
        output = payload["output"]
        assert isinstance(output, str)
        return {"explore": payload, "explore_note": note_of(self.role), "output": output}

    def explore_tokens(self, text: str, max_new_tokens: int) -> int | None:
        """Check ``text`` for ``explore`` before it is queued (a 422); the new tokens it
        will generate (``None``: none), for the server's budget."""
        return self.role.explore_tokens(self, text, max_new_tokens)

    def describe(self) -> dict[str, object]:
        """What ``GET /v1/model`` shows: family, config, vocabulary, parameters."""
        config = self.model.config
        family = self.loaded.family
        return {
            "family": family.name,
            "kind": self.kind,
            "endpoint": self.role.endpoint,
            "checkpoint": self.loaded.directory.name,
            "config": config.to_dict(),
            "vocab_size": self.tokenizer.vocab_size,
            "model_vocab_size": self.vocab_rows,
            "parameters": self.parameters,
            "max_len": self.max_len,
            "device": str(self.device),
            # serve --engine: what decodes /v1/translate (the explorer always reads this model)
            "engine": self.translator.describe() if self.translator else {"name": "attnkit"},
        }


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None
