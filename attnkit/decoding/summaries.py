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
  the tokens it gets alone). With ``prompt_lookup=K`` each prompt is continued
  alone by prompt-lookup speculative decoding (``attnkit.decoding.lookup``:
  drafts of up to ``K`` tokens copied from the e-mail, checked in one pass):
  the same greedy tokens, sooner for one text, fewer texts per second than a batch.
  An encoder-decoder with ``prompt_lookup=K`` is searched greedily (``beam`` is
  not used), one text at a time, with drafts from the text
  (``attnkit.decoding.source_lookup``): greedy search's summaries.

``stepper`` is what decodes the model (the caller's choice, e.g.
``attnkit.inference.stepper_for(model)``: the device's attention backend and
cache; default: the model itself, the reference path). The batched
decoder-only path decodes the model directly on its own cache; the backend
the stepper installed in its attention modules is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

import torch
from torch import nn

from attnkit.data.summaries import prompt_text
from attnkit.data.tokenizers import Tokenizer
from attnkit.decoding.protocol import AnyStepper, CausalStepper
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
    prompt_lookup: int = 0,
) -> list[str]:
    """One summary per text (``""`` for a blank one), in order; see the module doc."""
    if not texts:
        return []
    if max_tokens < 1:
        raise UsageError(f"max_tokens must be >= 1, got {max_tokens}")
    if prompt_lookup < 0:
        raise UsageError(f"prompt_lookup must be >= 0, got {prompt_lookup}")
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
                             stepper=steps, lookup=prompt_lookup)  # fmt: skip
        positions = cast(_Positions, model.config).max_len
        limit = min(text_tokens or positions - 1, positions - 1)
        src = [source_ids(tokenizer, t, limit) for t in texts]
        if prompt_lookup:  # greedy, one text at a time, drafted from the text
            from attnkit.decoding.source_lookup import lookup_decode_ids

            results = lookup_decode_ids(
                cast(AnyStepper, model), src, num_tokens=prompt_lookup,
                max_len=min(max_tokens, positions - 1), device=device, stepper=steps,
            )  # fmt: skip
        else:
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
    lookup: int = 0,
) -> list[str]:
    """The decoder-only summaries: the prompts continued ``batch_size`` at a time, or
    one by one with prompt lookup (``lookup`` > 0: the longest draft)."""
    kept = [i for i, text in enumerate(texts) if text.strip()]
    budget = text_tokens or DECODER_TEXT_TOKENS
    prompts = [tokenizer.encode(prompt_text(tokenizer, texts[i], text_tokens=budget))
               for i in kept]  # fmt: skip
    if lookup:
        new = [_looked_up(model, ids, max_tokens, lookup, stepper, device) for ids in prompts]
    else:
        new = continue_prompts(model, prompts, max_tokens, eos_id=model.eos_id,
                               batch_size=batch_size, stepper=stepper, device=device)  # fmt: skip
    out = [""] * len(texts)
    for i, tokens in zip(kept, new, strict=True):
        out[i] = tokenizer.decode(tokens).strip()
    return out


def _looked_up(
    model: RaggedModel,
    prompt: list[int],
    max_tokens: int,
    lookup: int,
    stepper: AnyStepper,
    device: torch.device | str,
) -> list[int]:
    """One prompt's greedy continuation by prompt lookup, without its end-of-sequence token
    (as ``continue_prompts`` returns it)."""
    from attnkit.decoding.lookup import lookup_stream

    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    eos = int(model.eos_id)
    tokens = lookup_stream(cast(CausalStepper[Any], model), ids, max_tokens, num_tokens=lookup,
                           eos_id=eos, stepper=stepper)  # fmt: skip
    out = [int(t) for t in tokens]
    return out[:-1] if out and out[-1] == eos else out
