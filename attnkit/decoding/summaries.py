"""Summaries of texts from an encoder-decoder or a decoder-only checkpoint.

* An encoder-decoder (``EncoderDecoder``, ``RNNSeq2Seq``) reads the text cut
  to ``text_tokens`` (default: its positions) and writes the summary, by
  greedy or beam search (``attnkit.decoding.text.decode_ids``), at most
  ``max_tokens`` tokens.
* A decoder-only LM is given the instruction prompt
  (``attnkit.data.summaries.prompt_text``: the text cut to ``text_tokens``, in
  the chat template) and continues it greedily until its end-of-sequence
  token, at most ``max_tokens`` new tokens, ``batch_size`` prompts at a time
  (``attnkit.decoding.ragged.continue_prompts``: each at its own positions,
  the tokens it gets alone).

``stepper`` is what decodes the model (the caller's choice, e.g.
``attnkit.inference.stepper_for(model)``: the device's attention backend and
cache; default: the model itself, the reference path). The batched
decoder-only path decodes the model directly on its own cache; the backend
the stepper installed in its attention modules is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast

import torch
from torch import nn

from attnkit.data.summaries import prompt_text
from attnkit.data.tokenizers import Tokenizer
from attnkit.decoding.protocol import AnyStepper
from attnkit.decoding.ragged import RaggedModel, continue_prompts
from attnkit.decoding.text import decode_ids, source_ids
from attnkit.errors import UsageError

# A decoder-only model's default cut of the text (its context may be far longer).
DECODER_TEXT_TOKENS = 448


class _Positions(Protocol):
    """A model config's position count (``max_len``)."""

    max_len: int


def is_decoder_only(model: nn.Module) -> bool:
    return getattr(model.config, "family", None) == "decoder_only"


def summarize_texts(
    model: nn.Module,  # an EncoderDecoder, RNNSeq2Seq or DecoderOnlyLM
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    beam: int = 4,
    alpha: float = 0.6,
    max_tokens: int = 32,
    text_tokens: int | None = None,
    batch_size: int = 32,
    device: torch.device | str | None = None,
    stepper: AnyStepper | None = None,
) -> list[str]:
    """One summary per text (``""`` for a blank one), in order; see the module doc."""
    if not texts:
        return []
    if max_tokens < 1:
        raise UsageError(f"max_tokens must be >= 1, got {max_tokens}")
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    steps = cast(AnyStepper, model) if stepper is None else stepper
    try:
        if is_decoder_only(model):
            if beam != 1:
                raise UsageError("a decoder-only model summarizes greedily: use beam 1")
            return _continue(cast(RaggedModel, model), tokenizer, texts, max_tokens=max_tokens,
                             text_tokens=text_tokens, batch_size=batch_size, device=device,
                             stepper=steps)  # fmt: skip
        positions = cast(_Positions, model.config).max_len
        limit = min(text_tokens or positions - 1, positions - 1)
        src = [source_ids(tokenizer, t, limit) for t in texts]
        results = decode_ids(
            steps, src, beam=beam, alpha=alpha, batch_size=batch_size,
            max_len=min(max_tokens, positions - 1), device=device,
        )  # fmt: skip
        return [tokenizer.decode(r.tokens[0]).strip() for r in results]
    finally:
        model.train(was_training)


def _continue(
    model: RaggedModel,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    max_tokens: int,
    text_tokens: int | None,
    batch_size: int,
    device: torch.device | str,
    stepper: AnyStepper,
) -> list[str]:
    """The decoder-only summaries: the prompts continued ``batch_size`` at a time."""
    kept = [i for i, text in enumerate(texts) if text.strip()]
    budget = text_tokens or DECODER_TEXT_TOKENS
    prompts = [tokenizer.encode(prompt_text(tokenizer, texts[i], text_tokens=budget))
               for i in kept]  # fmt: skip
    new = continue_prompts(model, prompts, max_tokens, eos_id=model.eos_id,
                           batch_size=batch_size, stepper=stepper, device=device)  # fmt: skip
    out = [""] * len(texts)
    for i, tokens in zip(kept, new, strict=True):
        out[i] = tokenizer.decode(tokens).strip()
    return out
