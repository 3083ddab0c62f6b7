"""Choices of a completion: ``n`` continuations of one prompt, cut at EOS or a stop string.

What the OpenAI-compatible endpoints run in the model worker. The ``n``
continuations of a prompt are decoded as one batch of ``n`` identical rows
(``attnkit.decoding.generate.stream``; one seeded generator, so a request with
a ``seed`` gives the same choices every time). A choice ends when its row draws
the model's EOS (``finish_reason="stop"``), when its text holds one of the
``stop`` strings (``"stop"``; the text ends before the string, as OpenAI's),
or after ``max_tokens`` tokens (``"length"``). Generation ends when every
choice has.

Text is handed out as it grows (``on_delta``) with two things held back: a
tail that could still become a stop string, and a trailing U+FFFD (a byte-level
token that ends inside a UTF-8 character). Each choice's text is decoded from
the last prompt tokens plus its own, as ``attnkit generate`` prints it, so
a leading space (SentencePiece's ``▁``) survives.

The decoding goes through a ``CancellableStepper``: a cancelled request (client
gone, time budget, shutdown) stops at the next step with ``RequestCancelled``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from attnkit.decoding.generate import stream
from attnkit.decoding.protocol import AnyStepper
from attnkit.serve.cancellable import CancellableStepper, Owners
from attnkit.serve.handles import RequestHandle
from attnkit.serve.model_host import ModelHost

__all__ = ["ChoiceText", "Completion", "OnDelta", "context_of", "feed", "generate_choices"]

_CONTEXT_TOKENS = 8  # prompt tokens decoded before a choice's own, for word boundaries

OnDelta = Callable[[int, str, "str | None"], None]
"""``on_delta(choice, text, finish_reason)``: new text of a choice; ``finish_reason`` set
(``"stop"``/``"length"``) on its last call."""


class Decoder(Protocol):
    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass
class ChoiceText:
    """One choice's text as its tokens come, cut at the first stop string.

    Args:
        tokenizer: what turns ids into text (special tokens skipped).
        context: the last few prompt tokens (decoded ahead, then removed).
        stops: strings that end the choice (not part of its text).
    """

    tokenizer: Decoder
    context: list[int]
    stops: Sequence[str]
    ids: list[int] = field(default_factory=list)
    text: str = ""
    sent: int = 0  # characters of ``text`` already handed out
    finish_reason: str | None = None
    _head: str | None = None

    def _decode(self) -> str:
        if self._head is None:
            self._head = self.tokenizer.decode(self.context)
        full = self.tokenizer.decode([*self.context, *self.ids])
        if full.startswith(self._head):
            return full[len(self._head) :]
        return self.tokenizer.decode(self.ids)

    def add(self, token: int) -> str:
        """Take one drawn token (not EOS); the text that is now safe to hand out."""
        self.ids.append(token)
        self.text = self._decode()
        cut = min((i for i in (self.text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.text = self.text[:cut]
            return self.finish("stop")
        safe = len(self.text)
        for s in self.stops:  # a tail that may still grow into a stop string waits
            for k in range(min(len(s) - 1, len(self.text)), 0, -1):
                if self.text.endswith(s[:k]):
                    safe = min(safe, len(self.text) - k)
                    break
        while safe > self.sent and self.text[safe - 1] == "\ufffd":
            safe -= 1
        return self._take(safe)

    @property
    def openai_reason(self) -> str | None:
        """OpenAI's ``finish_reason``: an EOS is a ``"stop"`` too."""
        return "stop" if self.finish_reason == "eos" else self.finish_reason

    def finish(self, reason: str) -> str:
        """End the choice; the rest of its text."""
        self.finish_reason = reason
        return self._take(len(self.text))

    def _take(self, upto: int) -> str:
        upto = max(upto, self.sent)
        delta, self.sent = self.text[self.sent : upto], upto
        return delta


def context_of(prompt: Sequence[int]) -> list[int]:
    """The prompt tokens a choice's text is decoded after (for word boundaries)."""
    return list(prompt[-_CONTEXT_TOKENS:])


def feed(choice: ChoiceText, token: int, *, eos: int, last: bool) -> str:
    """Give ``choice`` its next drawn token (``last``: the ``max_tokens``-th); the new text."""
    text = choice.finish("eos") if token == eos else choice.add(token)
    if choice.finish_reason is None and last:
        text += choice.finish("length")
    return text


@dataclass
class Completion:
    """The choices of one prompt and the token counts the usage reports."""

    prompt_tokens: int
    choices: list[ChoiceText]

    @property
    def completion_tokens(self) -> int:
        """Tokens drawn for every choice (an EOS that ended one counts)."""
        return sum(len(c.ids) + (c.finish_reason == "eos") for c in self.choices)


@torch.no_grad()
def generate_choices(
    engine: ModelHost,
    prompt: Sequence[int],
    *,
    n: int,
    max_tokens: int,
    temperature: float,
    top_p: float,
    seed: int,
    stops: Sequence[str] = (),
    handle: RequestHandle | None = None,
    on_delta: OnDelta | None = None,
    first_index: int = 0,
) -> Completion:
    """Decode ``n`` choices of ``prompt`` (see module doc); ``on_delta`` gets their text.

    ``first_index``: the index of the first choice in ``on_delta`` calls (a
    completion of several prompts numbers its choices across them).
    """
    model = engine.model
    assert engine.stepper is not None, "generate_choices needs a causal LM's engine"
    stepper: AnyStepper = engine.stepper
    if handle is not None:
        stepper = CancellableStepper(stepper, Owners.single(handle))
    eos = int(model.eos_id)
    context = context_of(prompt)
    choices = [ChoiceText(engine.tokenizer, context, stops) for _ in range(n)]
    generator = torch.Generator(device=engine.device).manual_seed(seed)
    prompt_ids = torch.tensor([list(prompt)] * n, dtype=torch.long, device=engine.device)
    for step, tokens in enumerate(stream(
        model, prompt_ids, max_tokens, temperature=temperature, top_p=top_p,
        generator=generator, stepper=stepper,
    )):  # fmt: skip
        for i, token in enumerate(tokens.tolist()):
            choice = choices[i]
            if choice.finish_reason is not None:
                continue  # its row runs on with the others; nobody reads it
            text = feed(choice, int(token), eos=eos, last=step + 1 == max_tokens)
            if on_delta is not None and (text or choice.finish_reason is not None):
                on_delta(first_index + i, text, choice.openai_reason)
        if all(c.finish_reason is not None for c in choices):
            break
    return Completion(len(prompt), choices)
