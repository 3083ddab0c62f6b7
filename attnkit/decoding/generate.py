"""Open-ended generation from a decoder-only model, streaming tokens as they come.

Works on any ``CausalStepper`` whose ``start(prompt_ids)`` prefills a prompt
and whose first ``step`` feeds its last token (``DecoderOnlyLM``), stepped by
itself or by a wrapper (``stepper=StaticCacheStepper(model)``). Each new token
is drawn from ``filter_logits`` (temperature, top-k, top-p), or is the argmax
with ``temperature=0``.

Past the model's context (``model.context_length``, e.g. nanoGPT's block size)
generation slides a window as nanoGPT does: the next token is predicted from
the last ``context_length`` tokens, re-encoded from scratch (absolute
positions shift, so the cache cannot be kept). Within the context every step
reuses the KV cache.

Shapes: ``B`` prompts, ``T`` prompt length, ``N`` new tokens, ``V`` vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, TypedDict, Unpack

import torch
from torch import Tensor

from attnkit.decoding.common import check_float, check_int
from attnkit.decoding.protocol import AnyStepper, CausalStepper
from attnkit.decoding.sampling import filter_logits
from attnkit.errors import UsageError


def _check(
    prompt_ids: Tensor, max_new_tokens: int, temperature: float, top_k: int, top_p: float
) -> None:
    if not isinstance(prompt_ids, Tensor) or prompt_ids.dim() != 2 or prompt_ids.size(1) < 1:
        shape = tuple(prompt_ids.shape) if isinstance(prompt_ids, Tensor) else prompt_ids
        raise UsageError(f"prompt_ids must be a (batch, length >= 1) tensor, got {shape}")
    check_int("max_new_tokens", max_new_tokens, 0)
    check_float("temperature", temperature, 0.0, math.inf, open_low=False)
    check_int("top_k", top_k, 0)
    check_float("top_p", top_p, 0.0, 1.0, open_low=True)


def pick_token(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """One token per row of ``logits`` ``(B, V)``: argmax if ``temperature == 0``, else a draw."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    probs = filter_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


class StreamOptions(TypedDict, total=False):
    """``stream``'s keyword options, as ``generate`` passes them on."""

    temperature: float
    top_k: int
    top_p: float
    generator: torch.Generator | None
    eos_id: int | None
    stepper: AnyStepper | None


@torch.no_grad()
def stream(
    model: CausalStepper[Any],
    prompt_ids: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    eos_id: int | None = None,
    stepper: AnyStepper | None = None,
) -> Iterator[Tensor]:
    """Yield the new tokens ``(B,)`` one step at a time, ``max_new_tokens`` steps.

    Args:
        model: e.g. a ``DecoderOnlyLM`` in eval mode.
        prompt_ids: ``(B, T)`` token ids, same length per row (no padding).
        temperature: >= 0; 0 is greedy (argmax), otherwise divides the logits.
        top_k, top_p: as in ``attnkit.decoding.sample`` (0 / 1.0: no filter).
        generator: seeded ``torch.Generator`` on the model's device, for
            reproducible draws (``None``: torch's global generator).
        eos_id: if given, stop once every row has produced it; rows that
            finished earlier yield ``model.pad_id`` afterwards.
        stepper: what steps ``model`` (default: the model itself), e.g.
            ``attnkit.decoding.static.StaticCacheStepper(model)``.
    """
    _check(prompt_ids, max_new_tokens, temperature, top_k, top_p)
    if max_new_tokens == 0:
        return
    steps: AnyStepper = model if stepper is None else stepper
    context = model.context_length

    def begin(ids: Tensor, tokens_left: int) -> tuple[Tensor, Any]:
        # Until the window slides, each step fills one more of the context's positions.
        state = steps.start(ids, max_steps=min(tokens_left, context - ids.size(1) + 1))
        return steps.step(ids[:, -1], state)

    ids = prompt_ids[:, -context:]
    logits, state = begin(ids, max_new_tokens)
    finished = torch.zeros(ids.size(0), dtype=torch.bool, device=ids.device)
    for n in range(max_new_tokens):
        tokens = pick_token(
            logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
        )
        if eos_id is not None:
            tokens = tokens.masked_fill(finished, model.pad_id)
            finished |= tokens == eos_id
        yield tokens
        if n + 1 == max_new_tokens or (eos_id is not None and bool(finished.all())):
            return
        ids = torch.cat([ids, tokens[:, None]], dim=1)
        if ids.size(1) > context:
            # The next position is past the context: re-encode the last window.
            ids = ids[:, -context:]
            logits, state = begin(ids, max_new_tokens - n - 1)
        else:
            logits, state = steps.step(tokens, state)


def generate(
    model: CausalStepper[Any],
    prompt_ids: Tensor,
    max_new_tokens: int,
    *,
    on_token: Callable[[Tensor], None] | None = None,
    **options: Unpack[StreamOptions],
) -> Tensor:
    """The prompt followed by its continuation, ``(B, T + N)``.

    ``on_token(tokens (B,))`` is called as each token is drawn (for printing
    as the text grows); ``options`` are ``stream``'s keyword arguments.
    """
    new = []
    for tokens in stream(model, prompt_ids, max_new_tokens, **options):
        if on_token is not None:
            on_token(tokens)
        new.append(tokens)
    if not new:
        return prompt_ids
    return torch.cat([prompt_ids, torch.stack(new, dim=1)], dim=1)
